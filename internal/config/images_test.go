package config

import (
	"strings"
	"testing"
)

// TestRouteImages: images is taken on an HTTP route and refused on a script route,
// which sends no request to show them in.
func TestRouteImages(t *testing.T) {
	text := strings.Replace(good, "cache = [\"prompt_cache_key\"]\n", "cache = [\"prompt_cache_key\"]\nimages = false\n", 1)
	cfg, err := Parse("kiln.toml", []byte(text))
	if err != nil || cfg.Routes["main"].Images == nil || *cfg.Routes["main"].Images {
		t.Fatalf("%+v %v", cfg.Routes["main"], err)
	}
	text = strings.Replace(good, "script = \"replies.jsonl\"\n", "script = \"replies.jsonl\"\nimages = true\n", 1)
	if _, err := Parse("kiln.toml", []byte(text)); err == nil || !strings.Contains(err.Error(), "routes.test.images") {
		t.Errorf("images on a script route: %v", err)
	}
}
