package config

import (
	"strings"
	"testing"
)

// TestReviewPolicy: [agent] review is allow or hold, its timeout not negative.
func TestReviewPolicy(t *testing.T) {
	cfg, err := Parse("kiln.toml", []byte(good+"review = \"hold\"\nreview_timeout_s = 60\n"))
	if err != nil || cfg.Agent.Review != "hold" || cfg.Agent.ReviewTimeoutSeconds != 60 {
		t.Fatalf("%+v %v", cfg.Agent, err)
	}
	for text, want := range map[string]string{
		"review = \"ask\"\n":      `agent.review: "ask" is not allow or hold`,
		"review_timeout_s = -1\n": "agent.review_timeout_s: must not be negative",
	} {
		if _, err := Parse("kiln.toml", []byte(good+text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", text, err, want)
		}
	}
}
