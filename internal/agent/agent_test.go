package agent_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/route/routetest"
	"github.com/kilnrt/kiln/internal/store"
)

// session is an agent.Session over a real workbench (real python3), keeping the agent's
// records and the speech its cells made.
type session struct {
	wb *kiln.Workbench

	mu      sync.Mutex
	records []agent.Record
	speech  []kiln.Speech
	pending []agent.Input
	head    agent.Header
	inbox   *agent.Inbox   // when set, pending inputs come from it
	journal *agent.Journal // when set, records go to it too
	started chan string    // each cell's id once its start is recorded
}

func newSession(t *testing.T) *session { return openSession(t, "") }

// openSession opens a session over a workbench of data directory dir ("" for an
// ephemeral record).
func openSession(t *testing.T, dir string) *session {
	t.Helper()
	s := &session{head: agent.Header{Text: "the header, revision 2", Digest: "d2"}, started: make(chan string, 64)}
	wb, err := kiln.OpenWorkbench(t.Context(), kiln.WorkbenchOptions{Dir: t.TempDir(), DataDir: dir, OnCellStart: func(id, _ string) {
		select {
		case s.started <- id:
		default:
		}
	}, OnSpeech: func(sp kiln.Speech) {
		s.mu.Lock()
		s.speech = append(s.speech, sp)
		s.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	s.wb = wb
	return s
}

func (s *session) ID() string { return "s-test" }

func (s *session) Execute(ctx context.Context, code string) (agent.Cell, error) {
	began := time.Now()
	rec, err := s.wb.Execute(ctx, code)
	if err != nil {
		return agent.Cell{}, err
	}
	c := agent.Cell{ID: rec.ID, Status: string(rec.Status), Started: began, Ended: time.Now(), NotRun: rec.NotRun}
	for _, o := range rec.Output {
		c.Output += o.Text
		if !strings.HasSuffix(o.Text, "\n") {
			c.Output += "\n"
		}
	}
	if rec.Error != nil {
		c.Error = *rec.Error
	}
	return c, nil
}

func (s *session) Pending(ctx context.Context) ([]agent.Input, error) {
	if s.inbox != nil {
		return s.inbox.Pending(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	return p, nil
}

func (s *session) MoveHead(context.Context, []agent.Input) (agent.Header, string, error) {
	return s.head, "fold", nil
}

func (s *session) Record(ctx context.Context, rec agent.Record) error {
	s.mu.Lock()
	s.records = append(s.records, rec)
	s.mu.Unlock()
	if s.journal != nil {
		return s.journal.Record(ctx, rec)
	}
	return nil
}

func (s *session) calls() []*agent.ModelCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*agent.ModelCall
	for _, r := range s.records {
		if c, ok := r.(*agent.ModelCall); ok {
			out = append(out, c)
		}
	}
	return out
}

func input(id int64, text string) agent.Input {
	payload, _ := json.Marshal(map[string]string{"text": text})
	return agent.Input{ID: id, Source: "operator", ReceivedAt: time.Date(2026, 9, 13, 18, 59, 0, 0, time.UTC), Payload: payload}
}

var wires = []struct {
	name, wire string
	cfg        route.Config
}{
	{"chat-stream", routetest.OpenAIChat, route.Config{Kind: route.KindOpenAIChat, Stream: true}},
	{"chat-whole", routetest.OpenAIChat, route.Config{Kind: route.KindOpenAIChat}},
	{"responses", routetest.OpenAIResponses, route.Config{Kind: route.KindOpenAIResponses}},
	{"anthropic", routetest.Anthropic, route.Config{Kind: route.KindAnthropic}},
}

func httpRoute(t *testing.T, cfg route.Config, srv *routetest.Server) agent.Route {
	t.Helper()
	cfg.Name, cfg.BaseURL, cfg.Model, cfg.APIKey, cfg.Tools = "main", srv.URL, "m", "k", true
	cfg.Backoff, cfg.Cache = time.Millisecond, []string{"prompt_cache_key"}
	c, err := route.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, cached, out := 0.15, 0.075, 0.60
	return agent.Route{Name: "main", Client: c, Price: agent.Price{Input: &in, CachedInput: &cached, CacheWrite: &in, Output: &out}}
}

const sendCode = `await runtime.request("local.send", text="hello, operator")`
const waitCode = `await runtime.wait(None, reason="waiting for input")`

func usageFor(wire string) string {
	switch wire {
	case routetest.Anthropic:
		return `{"input_tokens":1000,"cache_creation_input_tokens":0,"cache_read_input_tokens":3000,"output_tokens":100}`
	case routetest.OpenAIResponses:
		return `{"input_tokens":4000,"input_tokens_details":{"cached_tokens":3000},"output_tokens":100,"total_tokens":4100}`
	}
	return `{"prompt_tokens":4000,"prompt_tokens_details":{"cached_tokens":3000},"completion_tokens":100,"total_tokens":4100}`
}

// A turn: an operator input, code that speaks, code that waits.
func TestWaitedTurn(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			srv := routetest.New(t, w.wire,
				routetest.Step{Text: "I will greet.", Code: routetest.Code(sendCode), Usage: usageFor(w.wire)},
				routetest.Step{Code: routetest.Code(waitCode)})
			s := newSession(t)
			a := agent.New(s, agent.Config{Step: httpRoute(t, w.cfg, srv), Header: agent.Header{Text: "the header", Digest: "d1"}, MaxSteps: 10})
			end, err := a.Turn(t.Context(), []agent.Input{input(1, "say hello")})
			if err != nil {
				t.Fatal(err)
			}
			if end.EndReason != agent.EndWaited || end.Steps != 2 {
				t.Fatalf("got %+v; want waited after 2 steps", end)
			}
			if len(s.speech) != 1 || s.speech[0].Text != "hello, operator" || s.speech[0].Status != "confirmed" {
				t.Fatalf("speech %+v", s.speech)
			}
			calls := s.calls()
			if len(calls) != 2 || !calls[1].Extends || calls[1].PrefixDigest != calls[0].RequestDigest {
				t.Fatalf("the second request does not extend the first: %+v", calls)
			}
			// 1000 uncached at 0.15, 3000 cached at 0.075, 100 out at 0.60: 150+225+60 µ$.
			if calls[0].CostMicros == nil || *calls[0].CostMicros != 435 || calls[0].Usage == nil {
				t.Errorf("cost %v usage %+v", calls[0].CostMicros, calls[0].Usage)
			}
			if calls[1].Usage != nil || calls[1].CostMicros != nil || end.Totals.CostAbsent != 1 || *end.Totals.CostMicros != 435 {
				t.Errorf("a call without usage: %+v, totals %+v", calls[1], end.Totals)
			}
			bodies := srv.Bodies()
			h0, c0, _ := routetest.Conversation(w.wire, bodies[0])
			h1, c1, _ := routetest.Conversation(w.wire, bodies[1])
			if !bytes.Equal(h0, h1) || !bytes.HasPrefix(c1, c0) {
				t.Errorf("request 2 is not request 1 plus messages:\n%s\n%s", c0, c1)
			}
			if !bytes.Contains(bodies[1], []byte(`· ran `)) || !bytes.Contains(bodies[0], []byte(`[2026-09-13T18:59:00Z · operator]\nsay hello`)) {
				t.Errorf("the framing is missing:\n%s", bodies[1])
			}
		})
	}
}

// TestACellRefusedBeforeItRanHasNoRunningTime: the tool result of a cell the host
// refused (within the source limit, but its frame past 1 MiB once escaped) says why, with
// no running time.
func TestACellRefusedBeforeItRanHasNoRunningTime(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Code: routetest.Code("#" + strings.Repeat("\x01", 200000))},
		routetest.Step{Code: routetest.Code(waitCode)})
	s := newSession(t)
	a := agent.New(s, agent.Config{Step: httpRoute(t, route.Config{Kind: route.KindOpenAIChat, Stream: true}, srv), Header: agent.Header{Text: "h"}})
	if end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")}); err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("%+v %v", end, err)
	}
	bodies := srv.Bodies()
	if len(bodies) != 2 || !bytes.Contains(bodies[1], []byte(`Z]\nstatus: error\nthe host could not send the cell`)) ||
		bytes.Contains(bodies[1], []byte(`· ran `)) {
		t.Errorf("the refused cell's result, as the model reads it: %q", regexp.MustCompile(`.{0,40}"role":"tool".{0,200}`).FindAll(bodies[len(bodies)-1], -1))
	}
}

func TestModelErrorLeavesNoTrace(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat,
		routetest.Step{Status: 429, RetryAfter: "0"}, routetest.Step{Code: routetest.Code("1 + 1")},
		routetest.Step{Status: 500}, routetest.Step{Status: 500}, routetest.Step{Status: 500},
		routetest.Step{Code: routetest.Code(waitCode)})
	s := newSession(t)
	a := agent.New(s, agent.Config{Step: httpRoute(t, route.Config{Kind: route.KindOpenAIChat, Stream: true}, srv), Header: agent.Header{Text: "h"}})
	end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndModelError || !strings.Contains(end.Detail, "3 attempts") {
		t.Fatalf("got %+v, %v", end, err)
	}
	calls := s.calls()
	if len(calls[0].Failures) != 1 || calls[0].Failures[0].Status != 429 || calls[1].Error == "" || len(calls[1].Failures) != 3 {
		t.Fatalf("calls %+v %+v", calls[0], calls[1])
	}
	n := len(a.Conversation())
	end, err = a.Turn(t.Context(), []agent.Input{input(2, "again")})
	if err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	calls = s.calls()
	last := calls[len(calls)-1]
	if !last.Extends || last.Messages != n+1 {
		t.Errorf("the request after the failure is not the conversation plus the input: %+v (had %d)", last, n)
	}
	bodies := srv.Bodies()
	_, before, _ := routetest.Conversation(routetest.OpenAIChat, bodies[2])
	_, after, _ := routetest.Conversation(routetest.OpenAIChat, bodies[5])
	if !bytes.HasPrefix(after, before) {
		t.Error("the failed call changed the conversation")
	}
}

func scriptRoute(replies ...route.ScriptReply) agent.Route {
	return agent.Route{Name: "script", Client: route.NewScript(replies)}
}

func code(c string) *string { return &c }

func TestEndReasons(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replies []route.ScriptReply
		cfg     agent.Config
		want    string
		steps   int
	}{
		{"no_code", []route.ScriptReply{{Text: "I think"}, {Text: "still thinking"}}, agent.Config{}, agent.EndNoCode, 2},
		{"nudged then code", []route.ScriptReply{{Text: "I think"}, {Code: code(waitCode)}}, agent.Config{}, agent.EndWaited, 2},
		{"step_cap", []route.ScriptReply{{Code: code("1")}, {Code: code("2")}, {Code: code("3")}}, agent.Config{MaxSteps: 2}, agent.EndStepCap, 2},
		{"stuck", []route.ScriptReply{{Code: code("1/0")}, {Code: code("1/0")}, {Code: code("1/0")}, {Code: code("1")}}, agent.Config{}, agent.EndStuck, 3},
		{"not stuck", []route.ScriptReply{{Code: code("1/0")}, {Code: code("1/0")}, {Code: code("1")}, {Code: code("1/0")}, {Code: code(waitCode)}}, agent.Config{}, agent.EndWaited, 5},
		{"script exhausted", []route.ScriptReply{{Code: code("1")}}, agent.Config{}, agent.EndModelError, 2},
		{"token_cap", []route.ScriptReply{{Code: code("1"), Usage: []byte(`{"prompt_tokens":600,"completion_tokens":10}`)}, {Code: code("2")}},
			agent.Config{MaxTurnTokens: 500}, agent.EndTokenCap, 1},
		{"bad arguments", []route.ScriptReply{{Code: code(strings.Repeat("#", route.MaxCodeBytes+1))}, {Code: code(waitCode)}}, agent.Config{}, agent.EndWaited, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t)
			tc.cfg.Step, tc.cfg.Header = scriptRoute(tc.replies...), agent.Header{Text: "h"}
			a := agent.New(s, tc.cfg)
			end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")})
			if err != nil || end.EndReason != tc.want || end.Steps != tc.steps {
				t.Fatalf("got %+v, %v; want %s after %d steps", end, err, tc.want, tc.steps)
			}
			if tc.name == "no_code" {
				calls := s.calls()
				if calls[0].Purpose != agent.PurposeStep || calls[1].Purpose != agent.PurposeNudge || calls[0].Text != "I think" {
					t.Errorf("calls %+v %+v", calls[0], calls[1])
				}
				if len(s.speech) != 0 {
					t.Error("a text answer was delivered")
				}
			}
			if tc.name == "script exhausted" && !strings.Contains(end.Detail, "has no reply") {
				t.Errorf("detail %q", end.Detail)
			}
			ends := 0
			for _, r := range s.records {
				if _, ok := r.(*agent.TurnEnd); ok {
					ends++
				}
			}
			if ends != 1 {
				t.Errorf("%d end records", ends)
			}
		})
	}
}

func TestCostCapAndOverflow(t *testing.T) {
	price := 1.0
	r := scriptRoute(route.ScriptReply{Code: code("1"), Usage: []byte(`{"prompt_tokens":600,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens":10}`)},
		route.ScriptReply{Code: code("2")})
	r.Price = agent.Price{Input: &price, CachedInput: &price, Output: &price}
	s := newSession(t)
	end, err := agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "h"}, MaxTurnCostMicro: 610}).Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndCostCap || end.Steps != 1 || *end.Totals.CostMicros != 610 {
		t.Fatalf("at the cap: %+v, %v", end, err)
	}
	r.Client = route.NewScript([]route.ScriptReply{{Code: code("1"), Usage: []byte(`{"prompt_tokens":600,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens":10}`)},
		{Code: code(waitCode)}})
	end, err = agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "h"}, MaxTurnCostMicro: 611}).Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited || end.Steps != 2 {
		t.Fatalf("one below the cap: %+v, %v", end, err)
	}
	r = scriptRoute(route.ScriptReply{Code: code("1")})
	r.ContextTokens = 10
	end, err = agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "h"}}).Turn(t.Context(), []agent.Input{input(1, strings.Repeat("long ", 20))})
	if err != nil || end.EndReason != agent.EndOverflow || end.Steps != 0 {
		t.Fatalf("over the window: %+v, %v", end, err)
	}
}

func TestCancel(t *testing.T) {
	t.Run("mid model call", func(t *testing.T) {
		srv := routetest.New(t, routetest.Anthropic, routetest.Step{Hold: true})
		s := newSession(t)
		a := agent.New(s, agent.Config{Step: httpRoute(t, route.Config{Kind: route.KindAnthropic}, srv), Header: agent.Header{Text: "h"}})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-srv.Arrived
			cancel()
		}()
		end, err := a.Turn(ctx, []agent.Input{input(1, "go")})
		if err != nil || end.EndReason != agent.EndCancelled {
			t.Fatalf("got %+v, %v", end, err)
		}
	})
	t.Run("mid cell", func(t *testing.T) {
		s := newSession(t)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-s.started
			cancel()
		}()
		a := agent.New(s, agent.Config{Step: scriptRoute(route.ScriptReply{Code: code("import asyncio\nawait asyncio.sleep(60)")}),
			Header: agent.Header{Text: "h"}})
		end, err := a.Turn(ctx, []agent.Input{input(1, "go")})
		if err != nil || end.EndReason != agent.EndCancelled {
			t.Fatalf("got %+v, %v", end, err)
		}
		conv := a.Conversation()
		if last := conv[len(conv)-1]; last.Role != route.RoleTool || !strings.Contains(last.Text, "interrupted") {
			t.Errorf("the interrupted cell's result: %+v", last)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		s := newSession(t)
		a := agent.New(s, agent.Config{Step: scriptRoute(route.ScriptReply{Hold: true}), Header: agent.Header{Text: "h"}, TurnDeadline: 50 * time.Millisecond})
		end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")})
		if err != nil || end.EndReason != agent.EndDeadline {
			t.Fatalf("got %+v, %v", end, err)
		}
	})
}

func TestFold(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat,
		routetest.Step{Code: routetest.Code(waitCode), Usage: `{"prompt_tokens":1200,"completion_tokens":10}`},
		routetest.Step{Text: "Goal: greet.\nProgress: waited.\nDecisions: none.\nNext steps: none.\nFiles: none."},
		routetest.Step{Code: routetest.Code(waitCode)})
	s := newSession(t)
	r := httpRoute(t, route.Config{Kind: route.KindOpenAIChat, Stream: true}, srv)
	r.ContextTokens = 2000
	a := agent.New(s, agent.Config{Step: r, Header: agent.Header{Text: "the header, revision 1", Digest: "d1"}, FoldMarginTokens: 500})
	if end, err := a.Turn(t.Context(), []agent.Input{input(1, "first")}); err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	end, err := a.Turn(t.Context(), []agent.Input{input(2, "second")})
	if err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	var fold *agent.Fold
	for _, rec := range s.records {
		if f, ok := rec.(*agent.Fold); ok {
			fold = f
		}
	}
	if fold == nil || fold.HeadReason != "fold" || fold.HeaderBefore != "d1" || fold.HeaderAfter != "d2" || fold.Covers != 3 {
		t.Fatalf("fold %+v", fold)
	}
	calls := s.calls()
	if calls[1].Purpose != agent.PurposeFold || !calls[1].Extends || calls[1].PrefixDigest != calls[0].RequestDigest || calls[2].Extends {
		t.Errorf("calls %+v", calls)
	}
	bodies := srv.Bodies()
	if bytes.Contains(bodies[2], []byte("first")) || !bytes.Contains(bodies[2], []byte("Goal: greet.")) ||
		!bytes.Contains(bodies[2], []byte("the header, revision 2")) {
		t.Errorf("the request after the fold:\n%s", bodies[2])
	}
	// The fold's request is the step's request plus the instruction, tools and all: it
	// shares the cached prefix, as its record says.
	h0, c0, _ := routetest.Conversation(routetest.OpenAIChat, bodies[0])
	h1, c1, _ := routetest.Conversation(routetest.OpenAIChat, bodies[1])
	if !bytes.Contains(bodies[1], []byte(`"tools"`)) || !bytes.Equal(h0, h1) || !bytes.HasPrefix(c1, c0) {
		t.Errorf("the fold's request does not extend the step's:\n%s\n%s", bodies[0], bodies[1])
	}
}

func TestSteer(t *testing.T) {
	s := newSession(t)
	a := agent.New(s, agent.Config{Step: scriptRoute(route.ScriptReply{Code: code("1")}, route.ScriptReply{Code: code(waitCode)}),
		Header: agent.Header{Text: "h"}, OnStep: func(p agent.Progress) {
			if p.What == "cell_done" {
				s.mu.Lock()
				s.pending = append(s.pending, input(2, "also this"))
				s.mu.Unlock()
			}
		}})
	if end, err := a.Turn(t.Context(), []agent.Input{input(1, "go")}); err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	conv := a.Conversation()
	if conv[3].Role != route.RoleUser || !strings.HasSuffix(conv[3].Text, "also this") {
		t.Errorf("the steered input: %+v", conv)
	}
}

func TestJournalRecovers(t *testing.T) {
	st, err := store.OpenDir(t.Context(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, _, err := st.EnsureSession(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	j := agent.Journal{Store: st, Session: sess.ID}
	now := time.Now()
	for _, r := range []agent.Record{&agent.TurnStart{Turn: 1}, &agent.ModelCall{Turn: 1, Seq: 1}, &agent.TurnEnd{Turn: 1, EndReason: agent.EndWaited},
		&agent.TurnStart{Turn: 2}, &agent.ModelCall{Turn: 2, Seq: 1}} {
		if err := j.Record(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	turns, died, err := j.Recover(t.Context(), now)
	if err != nil || turns != 2 || len(died) != 1 || died[0] != 2 {
		t.Fatalf("got %d %v %v", turns, died, err)
	}
	if _, died, _ = j.Recover(t.Context(), now); len(died) != 0 {
		t.Fatalf("a second start ended %v again", died)
	}
	sums, err := j.Turns(t.Context())
	if err != nil || len(sums) != 2 || sums[1].End.EndReason != agent.EndHostDied || len(sums[0].Calls) != 1 {
		t.Fatalf("got %+v, %v", sums, err)
	}
}

// TestARefusedCallIsNotSentBackWhole has the model send code over a cell's cap: the
// call is refused, and the requests after it carry a note of its size, not the code.
func TestARefusedCallIsNotSentBackWhole(t *testing.T) {
	big := strings.Repeat("x", route.MaxCodeBytes+1)
	srv := routetest.New(t, routetest.OpenAIChat, routetest.Step{Code: &big}, routetest.Step{Code: code(waitCode)})
	s := newSession(t)
	end, err := agent.New(s, agent.Config{Step: httpRoute(t, route.Config{Kind: route.KindOpenAIChat}, srv), Header: agent.Header{Text: "h"}}).
		Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited || end.Steps != 2 {
		t.Fatalf("got %+v, %v; want a wait after the refused call", end, err)
	}
	second := srv.Bodies()[1]
	if len(second) > 64<<10 || !bytes.Contains(second, []byte(`omitted_bytes`)) {
		t.Errorf("the request after the refused call is %d bytes, note of its size %v; want it small, with the note",
			len(second), bytes.Contains(second, []byte(`omitted_bytes`)))
	}
}

// TestAConversationPastAnyWindowOverflows gives a route that names no window a request
// larger than any model takes: the turn ends overflow before it is sent.
func TestAConversationPastAnyWindowOverflows(t *testing.T) {
	r := scriptRoute(route.ScriptReply{Code: code("1")})
	end, err := agent.New(newSession(t), agent.Config{Step: r, Header: agent.Header{Text: "h"}}).
		Turn(t.Context(), []agent.Input{input(1, strings.Repeat("x", (agent.MaxWindowTokens+1)*agent.BytesPerToken))})
	if err != nil || end.EndReason != agent.EndOverflow || end.Steps != 0 {
		t.Fatalf("got %+v, %v; want overflow before the first step", end, err)
	}
}

// TestDroppedCallsAreRecorded has the model answer two python calls at once: the step
// runs the first, and the call's record counts the other.
func TestDroppedCallsAreRecorded(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := func(id, code string) string {
			return `{"id":"` + id + `","type":"function","function":{"name":"python","arguments":` + strconv.Quote(`{"code": `+strconv.Quote(code)+`}`) + `}}`
		}
		calls := call("c1", "1 + 1") + "," + call("c2", "2 + 2")
		if n.Add(1) > 1 {
			calls = call("c3", waitCode)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
			calls + `]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}))
	defer srv.Close()
	c, err := route.New(route.Config{Kind: route.KindOpenAIChat, BaseURL: srv.URL, Model: "m", APIKey: "k", Tools: true})
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t)
	end, err := agent.New(s, agent.Config{Step: agent.Route{Name: "main", Client: c}, Header: agent.Header{Text: "h"}}).
		Turn(t.Context(), []agent.Input{input(1, "go")})
	if err != nil || end.EndReason != agent.EndWaited {
		t.Fatalf("got %+v, %v", end, err)
	}
	calls := s.calls()
	if len(calls) != 2 || calls[0].DroppedCalls != 1 || calls[0].Code != "1 + 1" || calls[1].DroppedCalls != 0 {
		t.Fatalf("records %+v; want the first to count one dropped call", calls)
	}
}
