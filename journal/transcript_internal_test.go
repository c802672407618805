package journal

import "testing"

// TestCallLine checks the line a model call is shown as, with what its route reported
// and without.
func TestCallLine(t *testing.T) {
	micros := int64(1500)
	for _, c := range []struct {
		call ModelCall
		want string
	}{
		{ModelCall{Turn: 2, Seq: 3, Purpose: "fold", Route: "main", Model: "m", StopReason: "end_turn", LatencyMs: 12000,
			Usage: &Usage{PromptTokens: &TokenCount{Value: 0}, CachedPromptTokens: &TokenCount{Value: 0}, CompletionTokens: &TokenCount{Value: 7}}, CostMicros: &micros},
			"[model call 3 of turn 2 · fold · main/m · stop end_turn · 12s · in 0 · cached 0 · write - · out 7 · cost $0.001500]"},
		{ModelCall{Turn: 1, Seq: 1, Purpose: "step", Route: "main", Error: "route: 500", LatencyMs: 40},
			"[model call 1 of turn 1 · step · main · failed: route: 500 · 40ms · in - · cached - · write - · out - · cost -]"},
	} {
		if got := callLine(c.call); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}
