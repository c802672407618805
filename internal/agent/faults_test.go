package agent_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/route/routetest"
	"github.com/kilnrt/kiln/internal/store"
)

// durable gives s a journal in a store of its own, so that its records are written as a
// host writes them (strict JSON, valid UTF-8 only).
func durable(t *testing.T, s *session) *agent.Journal {
	t.Helper()
	st, err := store.OpenDir(t.Context(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sess, _, err := st.EnsureSession(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	j := &agent.Journal{Store: st, Session: sess.ID}
	s.journal = j
	return j
}

// TestAnErrorNotInUTF8EndsOneTurnOnly answers the first call with a 400 whose message is
// not UTF-8, as a proxy's page may be: the turn ends model_error on the record, and the
// next turn runs.
func TestAnErrorNotInUTF8EndsOneTurnOnly(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire, routetest.Step{Status: 400, Message: "bad BADBYTES request", Replace: []string{"BADBYTES", "\xff\xfe"}},
				routetest.Step{Code: routetest.Code(waitCode)})
			s := newSession(t)
			j := durable(t, s)
			a := agent.New(s, agent.Config{Step: httpRoute(t, w.cfg, srv), Header: agent.Header{Text: "h"}})
			end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")})
			if err != nil || end.EndReason != agent.EndModelError || !utf8.ValidString(end.Detail) || !strings.Contains(end.Detail, "\uFFFD") {
				t.Fatalf("turn 1: %+v, %v; want model_error recorded, the bytes replaced", end, err)
			}
			if end, err = a.Turn(t.Context(), []agent.Input{input(2, "again")}); err != nil || end.EndReason != agent.EndWaited {
				t.Fatalf("turn 2: %+v, %v", end, err)
			}
			turns, err := j.Turns(t.Context())
			if err != nil || len(turns) != 2 || turns[0].End == nil || len(turns[0].Calls) != 1 || turns[0].Calls[0].Error == "" {
				t.Fatalf("the record: %+v, %v", turns, err)
			}
		})
	}
}

// failing is a session whose records fail to be written while fail is set.
type failing struct {
	*session
	fail bool
}

func (f *failing) Record(ctx context.Context, rec agent.Record) error {
	if _, ok := rec.(*agent.ModelCall); ok && f.fail {
		return context.DeadlineExceeded
	}
	return f.session.Record(ctx, rec)
}

// TestARecordNotWrittenEndsTheTurnAndTheActorLivesOn: a model call whose record cannot be
// written ends its turn model_error; the actor takes the next input.
func TestARecordNotWrittenEndsTheTurnAndTheActorLivesOn(t *testing.T) {
	s := &failing{session: newSession(t), fail: true}
	a := agent.New(s, agent.Config{Step: scriptRoute(route.ScriptReply{Code: code("1")}, route.ScriptReply{Code: code(waitCode)}), Header: agent.Header{Text: "h"}})
	end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndModelError || !strings.Contains(end.Detail, "record") {
		t.Fatalf("got %+v, %v; want model_error naming the record", end, err)
	}
	s.fail = false
	if end, err = a.Turn(t.Context(), []agent.Input{input(2, "go")}); err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("the next turn: %+v, %v", end, err)
	}
}

// TestTextNotInUTF8KeepsThePaidCall has the model send text and code with bytes that are
// not UTF-8: the call is recorded, its text made valid, and its code runs.
func TestTextNotInUTF8KeepsThePaidCall(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			c := `await runtime.wait(None, reason="BADBYTES, a reason long enough to keep the placeholder whole")`
			srv := routetest.New(t, w.wire, routetest.Step{Text: "BADBYTES thinking aloud at some length", Code: &c, Replace: []string{"BADBYTES", "\xff"}})
			s := newSession(t)
			j := durable(t, s)
			end, err := agent.New(s, agent.Config{Step: httpRoute(t, w.cfg, srv), Header: agent.Header{Text: "h"}}).Turn(t.Context(), []agent.Input{input(1, "go")})
			if err != nil || end.EndReason != agent.EndWaited {
				t.Fatalf("got %+v, %v; want the code run", end, err)
			}
			turns, _ := j.Turns(t.Context())
			if len(turns) != 1 || len(turns[0].Calls) != 1 || !strings.Contains(turns[0].Calls[0].Text, "\uFFFD thinking") {
				t.Fatalf("the record: %+v", turns)
			}
		})
	}
}

// TestBadUsageNumbersKeepTheReply: a usage object kiln cannot read keeps the reply, says
// why on the record, and charges the call an upper bound.
func TestBadUsageNumbersKeepTheReply(t *testing.T) {
	s := newSession(t)
	end, err := agent.New(s, agent.Config{Step: scriptRoute(route.ScriptReply{Code: code(waitCode), Usage: []byte(`{"prompt_tokens":2.0,"completion_tokens":-1}`)}),
		Header: agent.Header{Text: "h"}}).Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	c := s.calls()[0]
	if c.Usage != nil || c.UsageProblem == "" || c.Charged == nil || !c.Charged.Bound || end.Totals.Bounded != 1 {
		t.Fatalf("call %+v charged %+v; want no usage, the problem, a bound charged", c, c.Charged)
	}
}

func price(v float64) *float64 { return &v }

// TestCapsFailClosed: caps fire where the route reports less than they need.
func TestCapsFailClosed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		usage string
		price agent.Price
		cfg   agent.Config
		want  string
	}{
		// No usage at all: the prompt estimate and the output bound (8192) are charged.
		{"tokens without usage", "", agent.Price{}, agent.Config{MaxTurnTokens: 8192}, agent.EndTokenCap},
		// No cached_tokens: the prompt is charged at the highest input price.
		{"cost without cached tokens", `{"prompt_tokens":1000,"completion_tokens":10}`,
			agent.Price{Input: price(1), CachedInput: price(0.1), Output: price(1)}, agent.Config{MaxTurnCostMicro: 1010}, agent.EndCostCap},
		// A kind used and not priced: the cost cannot be bounded.
		{"cost without an output price", `{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens":10}`,
			agent.Price{Input: price(1)}, agent.Config{MaxTurnCostMicro: 1 << 40}, agent.EndCostCap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := scriptRoute(route.ScriptReply{Code: code("1"), Usage: []byte(tc.usage)}, route.ScriptReply{Code: code(waitCode)})
			if tc.usage == "" {
				r = scriptRoute(route.ScriptReply{Code: code("1")}, route.ScriptReply{Code: code(waitCode)})
			}
			r.Price = tc.price
			tc.cfg.Step, tc.cfg.Header = r, agent.Header{Text: "h"}
			end, err := agent.New(newSession(t), tc.cfg).Turn(t.Context(), []agent.Input{input(1, "go")})
			if err != nil || end.EndReason != tc.want || end.Steps != 1 {
				t.Fatalf("got %+v, %v; want %s after one step", end, err, tc.want)
			}
		})
	}
	// One below each bound, the turn goes on.
	r := scriptRoute(route.ScriptReply{Code: code("1"), Usage: []byte(`{"prompt_tokens":1000,"completion_tokens":10}`)}, route.ScriptReply{Code: code(waitCode)})
	r.Price = agent.Price{Input: price(1), CachedInput: price(0.1), Output: price(1)}
	end, err := agent.New(newSession(t), agent.Config{Step: r, Header: agent.Header{Text: "h"}, MaxTurnCostMicro: 1011}).Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited || end.Steps != 2 || end.Totals.Bounded != 2 {
		t.Fatalf("one below the cap: %+v, %v", end, err)
	}
}

// TestSessionAndDayCaps: a session's calls over its cap end its next turn before any
// call; a day's over the ledger's cap end every agent's sharing it.
func TestSessionAndDayCaps(t *testing.T) {
	u := []byte(`{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens":0}`)
	priced := func(replies ...route.ScriptReply) agent.Route {
		r := scriptRoute(replies...)
		r.Price = agent.Price{Input: price(1), CachedInput: price(1), Output: price(1)}
		return r
	}
	a := agent.New(newSession(t), agent.Config{Step: priced(route.ScriptReply{Code: code(waitCode), Usage: u}, route.ScriptReply{Code: code(waitCode), Usage: u}),
		Header: agent.Header{Text: "h"}, MaxSessionCostMicro: 100})
	if end, _ := a.Turn(t.Context(), []agent.Input{input(1, "go")}); end.EndReason != agent.EndWaited {
		t.Fatalf("turn 1: %+v", end)
	}
	if end, _ := a.Turn(t.Context(), []agent.Input{input(2, "go")}); end.EndReason != agent.EndCostCap || end.Steps != 0 || !strings.Contains(end.Detail, "session") {
		t.Fatalf("turn 2: %+v; want cost_cap (session) before a step", end)
	}
	// What other sessions charged to this one — its peers' calls — counts toward its cap.
	peers := agent.New(newSession(t), agent.Config{Step: priced(route.ScriptReply{Code: code(waitCode), Usage: u}),
		Header: agent.Header{Text: "h"}, MaxSessionCostMicro: 100, Charged: func() int64 { return 100 }})
	if end, _ := peers.Turn(t.Context(), []agent.Input{input(1, "go")}); end.EndReason != agent.EndCostCap || end.Steps != 0 ||
		!strings.Contains(end.Detail, "session: 100 µ$ charged of 100") {
		t.Fatalf("a session whose peers spent its cap: %+v; want cost_cap (session) before a step", end)
	}
	under := agent.New(newSession(t), agent.Config{Step: priced(route.ScriptReply{Code: code(waitCode), Usage: u}),
		Header: agent.Header{Text: "h"}, MaxSessionCostMicro: 100, Charged: func() int64 { return 99 }})
	if end, _ := under.Turn(t.Context(), []agent.Input{input(1, "go")}); end.EndReason != agent.EndWaited {
		t.Fatalf("a session whose peers spent one below its cap: %+v", end)
	}
	var ledger agent.Ledger
	s := newSession(t)
	one := agent.New(s, agent.Config{Step: priced(route.ScriptReply{Code: code(waitCode), Usage: u}), Header: agent.Header{Text: "h"}, MaxDayCostMicro: 99, Ledger: &ledger})
	two := agent.New(s, agent.Config{Step: priced(route.ScriptReply{Code: code(waitCode), Usage: u}), Header: agent.Header{Text: "h"}, MaxDayCostMicro: 99, Ledger: &ledger})
	if end, _ := one.Turn(t.Context(), []agent.Input{input(1, "go")}); end.EndReason != agent.EndWaited {
		t.Fatalf("the first agent: %+v", end)
	}
	if end, _ := two.Turn(t.Context(), []agent.Input{input(1, "go")}); end.EndReason != agent.EndCostCap || !strings.Contains(end.Detail, "day") {
		t.Fatalf("the second agent: %+v; want cost_cap (day)", end)
	}
	if got := ledger.Spent(time.Now().Add(24 * time.Hour)); got != 0 {
		t.Errorf("the next day starts at %d", got)
	}
}

// TestTheFoldMarginCoversAStep: the margin is at least one reply at the route's output
// bound and one cell's whole output.
func TestTheFoldMarginCoversAStep(t *testing.T) {
	r := scriptRoute()
	r.ContextTokens = 200000
	a := agent.New(newSession(t), agent.Config{Step: r, FoldMarginTokens: 16384})
	if got, want := a.Margin(), int64(route.DefaultMaxOutputTokens+agent.MaxCellOutputTokens); got != want || agent.MaxCellOutputTokens != 21846 {
		t.Errorf("margin %d; want %d", got, want)
	}
}

// fold is a scripted summary.
var summary = route.ScriptReply{Text: "Goal: g.\nProgress: p.\nDecisions: d.\nNext steps: n.\nFiles: none."}

// TestOverflowInTheMiddleOfATurnFoldsAndGoesOn: a step whose prompt crosses the margin
// folds at the next step boundary and the turn carries on.
func TestOverflowInTheMiddleOfATurnFoldsAndGoesOn(t *testing.T) {
	r := scriptRoute(route.ScriptReply{Code: code("print('big')"), Usage: []byte(`{"prompt_tokens":2500,"completion_tokens":10}`)},
		summary, route.ScriptReply{Code: code(waitCode)})
	r.ContextTokens = 4000
	s := newSession(t)
	a := agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "h"}})
	end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited || end.Steps != 2 {
		t.Fatalf("got %+v, %v; want waited after 2 steps", end, err)
	}
	calls := s.calls()
	if len(calls) != 3 || calls[1].Purpose != agent.PurposeFold || a.Summary() == "" {
		t.Fatalf("calls %+v", calls)
	}
	if conv := a.Conversation(); conv[0].Text != agent.Continued {
		t.Errorf("the conversation after the fold: %+v", conv)
	}
}

// TestContextLengthExceededFoldsAndRetriesOnce: the model refuses a request as over its
// window: the agent folds and retries; a second refusal in the turn ends it overflow.
func TestContextLengthExceededFoldsAndRetriesOnce(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat,
		routetest.Step{Code: routetest.Code("print(1)")},
		routetest.Step{Status: 400, ErrorCode: "context_length_exceeded", Message: "This model's maximum context length is 4000 tokens."},
		routetest.Step{Text: summary.Text},
		routetest.Step{Code: routetest.Code(waitCode)},
		routetest.Step{Status: 400, ErrorCode: "context_length_exceeded", Message: "This model's maximum context length is 4000 tokens."},
		routetest.Step{Text: summary.Text},
		routetest.Step{Status: 400, ErrorCode: "context_length_exceeded", Message: "This model's maximum context length is 4000 tokens."})
	r := httpRoute(t, route.Config{Kind: route.KindOpenAIChat, Stream: true}, srv)
	r.ContextTokens = 100000
	s := newSession(t)
	a := agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "h"}})
	end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v; want the turn carried on after a fold", end, err)
	}
	if !bytes.Contains(srv.Bodies()[3], []byte("Goal: g.")) {
		t.Errorf("the retried request has no summary:\n%s", srv.Bodies()[3])
	}
	end, err = a.Turn(t.Context(), []agent.Input{input(2, "more")})
	if err != nil || end.EndReason != agent.EndModelError {
		t.Fatalf("a second refusal in a turn: %+v, %v; want model_error, no fold loop", end, err)
	}
	if n := len(srv.Bodies()); n != 7 {
		t.Errorf("%d requests; want 7", n)
	}
}

// TestAFoldThatFailsBacksOff: a fold whose summary is over a quarter of the window fails,
// is recorded so, and the next is tried after 1, then 2 turns, not at every turn.
func TestAFoldThatFailsBacksOff(t *testing.T) {
	big := route.ScriptReply{Text: strings.Repeat("long summary ", 2000)}
	wait := route.ScriptReply{Code: code(waitCode), Usage: []byte(`{"prompt_tokens":4500,"completion_tokens":10}`)}
	r := scriptRoute(wait, big, wait, big, wait, wait, big, wait)
	r.ContextTokens = 8000
	s := newSession(t)
	a := agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "h"}})
	for i := range 5 {
		if end, err := a.Turn(t.Context(), []agent.Input{input(int64(i+1), "go")}); err != nil || end.EndReason != agent.EndWaited {
			t.Fatalf("turn %d: %+v, %v", i+1, end, err)
		}
	}
	var folds []*agent.Fold
	for _, rec := range s.records {
		if f, ok := rec.(*agent.Fold); ok {
			folds = append(folds, f)
		}
	}
	if len(folds) != 3 || folds[0].Turn != 2 || folds[1].Turn != 3 || folds[2].Turn != 5 || !strings.Contains(folds[0].Error, "quarter") {
		for _, f := range folds {
			t.Logf("fold %+v", *f)
		}
		t.Fatalf("%d folds; want failed folds at turns 2, 3 and 5", len(folds))
	}
}

// TestARouteWithoutToolsIsNudgedToWriteABlock: the nudge of a route without tools asks
// for a fenced block, and a refused block of 1 MiB is not sent back.
func TestARouteWithoutToolsIsNudgedToWriteABlock(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Text: "let me think"},
		routetest.Step{Text: "```python\n#" + strings.Repeat("x", 1<<20) + "\n```"},
		routetest.Step{Text: "```python\n" + waitCode + "\n```"})
	c, err := route.New(route.Config{Kind: route.KindOpenAIChat, BaseURL: srv.URL, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	end, err := agent.New(newSession(t), agent.Config{Step: agent.Route{Name: "text", Client: c}, Header: agent.Header{Text: "h"}}).
		Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited || end.Steps != 3 {
		t.Fatalf("got %+v, %v", end, err)
	}
	bodies := srv.Bodies()
	if !bytes.Contains(bodies[1], []byte("no python block")) || bytes.Contains(bodies[1], []byte("calling the python tool")) {
		t.Errorf("the nudge:\n%s", bodies[1])
	}
	if len(bodies[2]) > 64<<10 {
		t.Errorf("the request after the refused block is %d bytes", len(bodies[2]))
	}
}

// observing is a session that observes a changed header at each turn's start.
type observing struct {
	*session
	notices []string
}

func (o *observing) ObserveHeader(context.Context) ([]string, error) {
	n := o.notices
	o.notices = nil
	return n, nil
}

// TestAHeaderChangeIsObservedBeforeTheFirstCall: the observation is in the turn's first
// request, after its inputs.
func TestAHeaderChangeIsObservedBeforeTheFirstCall(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Code: routetest.Code(waitCode)})
	s := &observing{session: newSession(t), notices: []string{"[2026-09-13T19:54:53Z · instructions changed for this runtime · changed outside this transcript]\nnew text"}}
	if end, err := agent.New(s, agent.Config{Step: httpRoute(t, route.Config{Kind: route.KindOpenAIChat}, srv), Header: agent.Header{Text: "h"}}).
		Turn(t.Context(), []agent.Input{input(1, "go")}); err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	body := srv.Bodies()[0]
	if i, j := bytes.Index(body, []byte("operator]")), bytes.Index(body, []byte("instructions changed")); i < 0 || j < i {
		t.Errorf("the first request:\n%s", body)
	}
}

// TestADiedTurnIsToldTheModel: a turn the host's death ended is said, on one line, at
// the start of the next turn's first request.
func TestADiedTurnIsToldTheModel(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Code: routetest.Code(waitCode)}, routetest.Step{Code: routetest.Code(waitCode)})
	a := agent.New(newSession(t), agent.Config{Step: httpRoute(t, route.Config{Kind: route.KindOpenAIChat}, srv), Header: agent.Header{Text: "h"}})
	a.Died([]int64{7})
	if end, err := a.Turn(t.Context(), []agent.Input{input(8, "go")}); err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	if !bytes.Contains(srv.Bodies()[0], []byte("turn 7 ended host_died")) {
		t.Errorf("the first request does not say turn 7 died:\n%s", srv.Bodies()[0])
	}
	if end, _ := a.Turn(t.Context(), []agent.Input{input(9, "go")}); end.EndReason != agent.EndWaited || bytes.Count(srv.Bodies()[1], []byte("host_died")) != 1 {
		t.Errorf("the marker is said more than once:\n%s", srv.Bodies()[1])
	}
}
