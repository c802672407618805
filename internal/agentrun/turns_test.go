package agentrun_test

import (
	stdjson "encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/route/routetest"
	"github.com/kilnrt/kiln/journal"
)

// A turn's records read back through the public API: its trigger, end, calls with
// their usage and cost, and the sums by route.
func TestTurnsAndUsageByRoute(t *testing.T) {
	wb, dir, ends := agentWorkbench(t, "price_per_mtok = { input = 1.0, cached_input = 0.5, output = 2.0 }",
		`{"code":"x = 1","usage":{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":400},"completion_tokens":20}}`,
		`{"code":"await runtime.wait(None)"}`)
	id, err := wb.Input(t.Context(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if p := <-ends; p.End != string(journal.TurnWaited) {
		t.Fatalf("%+v", p)
	}
	j, err := journal.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	turns, err := j.Turns(t.Context(), wb.Name())
	if err != nil || len(turns) != 1 {
		t.Fatalf("turns %+v, %v", turns, err)
	}
	turn := turns[0]
	if turn.Start == nil || turn.Start.Turn != 1 || len(turn.Start.Trigger) != 1 || turn.Start.Trigger[0] != id {
		t.Fatalf("start %+v, want triggered by input %d", turn.Start, id)
	}
	if turn.End == nil || turn.End.EndReason != journal.TurnWaited || turn.End.Steps != 2 || len(turn.Calls) != 2 {
		t.Fatalf("end %+v, %d calls", turn.End, len(turn.Calls))
	}
	first := turn.Calls[0]
	// 600 uncached at $1, 400 cached at $0.5, 20 out at $2 a million: 600+200+40 µ$.
	if first.Seq != 1 || first.Purpose != "step" || first.Route != "test" || first.Code != "x = 1" || first.Usage == nil ||
		first.Usage.PromptTokens.Value != 1000 || first.Usage.CachedPromptTokens.Value != 400 || first.CostMicros == nil || *first.CostMicros != 840 {
		t.Fatalf("first call %+v", first)
	}
	if second := turn.Calls[1]; second.Usage != nil || second.CostMicros != nil {
		t.Fatalf("the second call reported nothing, yet shows %+v", second)
	}
	sum := turn.Totals()
	if _, ok := sum.Cost(); ok || sum.Calls != 2 || *sum.InputTokens != 1000 || *sum.OutputTokens != 20 || sum.CostAbsent != 1 {
		t.Fatalf("totals %+v", sum)
	}
	if a, b := mustJSON(t, sum), mustJSON(t, turn.End.Totals); a != b {
		t.Errorf("the calls sum to %s; the end recorded %s", a, b)
	}

	byRoute, err := j.UsageByRoute(t.Context())
	if err != nil || len(byRoute) != 1 || byRoute[0].Route != "test" || byRoute[0].Session != wb.Name() {
		t.Fatalf("usage %+v, %v", byRoute, err)
	}
	if rate, ok := byRoute[0].Totals.HitRate(); !ok || rate != 0.4 || byRoute[0].Totals.Calls != 2 {
		t.Errorf("usage %+v, hit rate %v %v", byRoute[0], rate, ok)
	}

	// A turn is the same value through encoding/json and through the strict codec.
	line := mustJSON(t, turn)
	for _, want := range []string{`{"start":{"turn":1,"trigger_input_ids":[`, `"end_reason":"waited"`, `"cost_micros":840`, `"folds":[]}`} {
		if !strings.Contains(line, want) {
			t.Errorf("the turn's JSON lacks %s:\n%s", want, line)
		}
	}
	var back journal.Turn
	std, err := stdjson.Marshal(turn)
	if err != nil {
		t.Fatal(err)
	}
	if err := stdjson.Unmarshal(std, &back); err != nil {
		t.Fatal(err)
	}
	if again := mustJSON(t, back); again != line {
		t.Errorf("through encoding/json\n%s\nwant\n%s", again, line)
	}

	if _, err := j.Turns(t.Context(), "nobody"); !errors.Is(err, journal.ErrNoSession) || !strings.Contains(err.Error(), `session "nobody"`) {
		t.Errorf("turns of a session there is not: %v", err)
	}
}

// Totals derive what a route left to be derived, and a cost is known only when every
// call's is.
func TestTotalsAdd(t *testing.T) {
	cost := int64(7)
	var sum journal.Totals
	// Anthropic's input_tokens are the prompt tokens neither read from nor written to
	// the cache: the prompt is their sum with the cached and written ones.
	sum.Add(journal.ModelCall{Usage: &journal.Usage{Shape: "anthropic", UncachedUnwrittenPromptTokens: &journal.TokenCount{Value: 100},
		CachedPromptTokens: &journal.TokenCount{Value: 50}, CacheWriteTokens: &journal.TokenCount{Value: 10},
		CompletionTokens: &journal.TokenCount{Value: 5}}, CostMicros: &cost})
	if got, ok := sum.Cost(); !ok || got != 7 || sum.CostText() != "$0.000007" || *sum.InputTokens != 160 || *sum.CacheWrite != 10 {
		t.Fatalf("after one call: %+v", sum)
	}
	sum.Add(journal.ModelCall{})
	if _, ok := sum.Cost(); ok || sum.CostText() != "-" || sum.Calls != 2 || sum.CostAbsent != 1 || *sum.InputTokens != 160 {
		t.Fatalf("after a call that reported nothing: %+v", sum)
	}
	if rate, ok := sum.HitRate(); !ok || rate != 50.0/160 {
		t.Errorf("hit rate %v %v", rate, ok)
	}
	if _, ok := (journal.Totals{}).HitRate(); ok {
		t.Error("no call, yet a hit rate")
	}
}

// A failed attempt's wait is in nanoseconds, the same in both codecs.
func TestRouteFailureJSON(t *testing.T) {
	f := journal.RouteFailure{Status: 429, Error: "slow down", RetryAfterNs: (2 * time.Second).Nanoseconds()}
	const want = `{"status":429,"error":"slow down","retry_after_ns":2000000000}`
	if got := mustJSON(t, f); got != want {
		t.Errorf("got %s; want %s", got, want)
	}
	if got, err := stdjson.Marshal(f); err != nil || string(got) != want {
		t.Errorf("encoding/json: got %s, %v; want %s", got, err, want)
	}
	var back journal.RouteFailure
	if err := json.Unmarshal([]byte(want), &back); err != nil || back != f {
		t.Errorf("got %+v, %v", back, err)
	}
}

// mustJSON is v as the strict codec writes it.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A failed attempt that asked to be retried later is in the record with its wait.
func TestTurnsKeepARetriedFailure(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Status: 429, RetryAfter: "1"},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None)`)})
	wb, dir, ends := agentWorkbenchOn(t, fmt.Sprintf("[routes.test]\nkind = \"openai-chat\"\nbase_url = %q\nmodel = \"m\"\n", srv.URL))
	if _, err := wb.Input(t.Context(), "go"); err != nil {
		t.Fatal(err)
	}
	if p := <-ends; p.End != string(journal.TurnWaited) {
		t.Fatalf("%+v", p)
	}
	j, err := journal.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	turns, err := j.Turns(t.Context(), wb.Name())
	if err != nil || len(turns) != 1 || len(turns[0].Calls) != 1 {
		t.Fatalf("turns %+v, %v", turns, err)
	}
	if f := turns[0].Calls[0].Failures; len(f) != 1 || f[0].Status != 429 || f[0].RetryAfterNs != time.Second.Nanoseconds() {
		t.Errorf("failures %+v", f)
	}
}
