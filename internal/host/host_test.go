package host_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wait"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// bench is a router serving a real python3 worker, recording into an ephemeral store,
// driven as a Workbench drives it.
type bench struct {
	t      *testing.T
	store  *store.Store
	sess   store.Session
	router *host.Router
	w      *worker.Worker
}

func newBench(t *testing.T, services map[string]host.Service) *bench {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sess, _, err := st.EnsureSession(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	r := host.New(host.Config{Store: st, Session: sess})
	r.Handle(wait.Method, wait.Service{})
	for m, s := range services {
		r.Handle(m, s)
	}
	gen, _ := st.NextGeneration(ctx, sess.ID)
	r.SetGeneration(gen)
	w, err := worker.Start(ctx, worker.Config{SessionID: "test", Generation: gen, Handler: r})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Shutdown(time.Second) })
	return &bench{t: t, store: st, sess: sess, router: r, w: w}
}

// run executes code as the next cell, as kiln.Workbench does, and returns its record
// and whether the host accepted a wait of it.
func (b *bench) run(ctx context.Context, code string) (worker.Record, bool) {
	b.t.Helper()
	e, err := b.store.StartExecution(context.Background(), b.sess.ID, b.w.Generation(), code)
	if err != nil {
		b.t.Fatal(err)
	}
	b.router.Begin(e.CellID)
	rec, err := b.w.Execute(ctx, e.CellID, code)
	if err != nil {
		b.t.Fatal(err)
	}
	yielded := b.router.End(e.CellID)
	status := rec.Status
	if yielded {
		status = wire.StatusYielded
	}
	b.store.EndExecution(context.Background(), e, store.ExecutionEnd{Status: string(status), Error: rec.Error})
	return rec, yielded
}

func result(rec worker.Record) string {
	var parts []string
	for _, o := range rec.Output {
		if o.Stream == wire.StreamResult {
			parts = append(parts, o.Text)
		}
	}
	if len(parts) == 0 && rec.Error != nil {
		return "error: " + *rec.Error
	}
	return strings.Join(parts, "|")
}

func TestTheCapIsPerCellAndTheCellGoesOn(t *testing.T) {
	b := newBench(t, nil)
	ctx := context.Background()
	rec, _ := b.run(ctx, `from kiln.runtime import HostError
ok, refused = 0, []
for i in range(130):
    try:
        await runtime.inspect()
        ok += 1
    except HostError as e:
        refused.append(e.code)
(ok, refused)`)
	if want := "(128, ['request_limit', 'request_limit'])"; result(rec) != want {
		t.Errorf("got %q; want %q", result(rec), want)
	}
	rec, _ = b.run(ctx, `(await runtime.inspect())["requests_made"]`)
	if result(rec) != "1" {
		t.Errorf("the next cell's first request: %q", result(rec))
	}
}

func TestABackgroundTaskThatOutlivesItsCellIsRefused(t *testing.T) {
	b := newBench(t, nil)
	ctx := context.Background()
	b.run(ctx, `import asyncio
from kiln.runtime import HostError
started = asyncio.Event()
async def later():
    await started.wait()
    try:
        return await runtime.inspect()
    except HostError as e:
        return e.code
pending = asyncio.ensure_future(later())
(await runtime.inspect())["execution_id"]`)
	rec, _ := b.run(ctx, "started.set()\nawait pending")
	if result(rec) != "'execution_ended'" {
		t.Errorf("got %q; want 'execution_ended'", result(rec))
	}
}

func TestAYieldedExecutionIsRefused(t *testing.T) {
	b := newBench(t, nil)
	ctx := context.Background()
	rec, yielded := b.run(ctx, `import asyncio
from kiln.runtime import HostError
go_on = asyncio.Event()
async def after():
    await go_on.wait()
    try:
        await runtime.inspect()
        return "served"
    except HostError as e:
        return e.code
tail = asyncio.ensure_future(after())
print("before")
try:
    await runtime.wait(30, "until the operator speaks")
except BaseException as caught:
    kind = type(caught).__name__
    go_on.set()
    try:
        await runtime.inspect()
        print("served after the wait")
    except HostError as e:
        print("refused", e.code)
print("below the wait")`)
	if !yielded || rec.Status != wire.StatusYielded {
		t.Fatalf("got %s yielded=%v (%s); want yielded", rec.Status, yielded, result(rec))
	}
	out := ""
	for _, o := range rec.Output {
		out += o.Text
	}
	if !strings.Contains(out, "before\n") || !strings.Contains(out, "refused execution_yielded") || strings.Contains(out, "served") {
		t.Errorf("output %q: want before, and the request after the wait refused", out)
	}
	rec, _ = b.run(ctx, "kind, await tail")
	if got := result(rec); got != "('Yielded', 'execution_yielded')" && got != "('Yielded', 'execution_ended')" {
		t.Errorf("got %q", result(rec))
	}
}

func TestWaitSeconds(t *testing.T) {
	b := newBench(t, nil)
	ctx := context.Background()
	for _, c := range []struct {
		seconds string
		want    string
	}{
		{"0", "invalid_request"},
		{"-1", "invalid_request"},
		{"601", "invalid_request"},
		{"600.0000001", "invalid_request"},
		{"float('nan')", "invalid_request"},
		{"float('inf')", "invalid_request"},
		{"'5'", "invalid_request"},
		{"True", "invalid_request"},
		{"600", "yielded"},
		{"0.001", "yielded"},
		{"None", "yielded"},
	} {
		t.Run(c.seconds, func(t *testing.T) {
			rec, _ := b.run(ctx, fmt.Sprintf(`from kiln.runtime import HostError
try:
    await runtime.wait(%s, "test")
except HostError as e:
    print(e.code)`, c.seconds))
			got := string(rec.Status)
			if rec.Status == wire.StatusOK && len(rec.Output) == 1 {
				got = strings.TrimSpace(rec.Output[0].Text)
			}
			if got != c.want {
				t.Errorf("wait(%s): got %q (%v); want %q", c.seconds, got, rec.Output, c.want)
			}
		})
	}
}

func TestAWaitWithPendingInputReturnsAtOnce(t *testing.T) {
	b := newBench(t, nil)
	ctx := context.Background()
	ev, err := b.store.AppendEvent(ctx, b.sess.ID, store.SourceOperator, map[string]string{"text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	rec, yielded := b.run(ctx, `r = await runtime.wait(None, "anything new?")
r["status"], r["inputs"], (await runtime.inspect())["pending_inputs"]`)
	want := fmt.Sprintf("('input_pending', ['event:%d'], [])", ev.ID)
	if yielded || result(rec) != want {
		t.Errorf("got %q yielded=%v; want %q", result(rec), yielded, want)
	}
	// Delivered: the next wait ends the turn.
	if _, yielded := b.run(ctx, `await runtime.wait(1, "more?")`); !yielded {
		t.Error("the second wait did not yield")
	}
}

func TestALateReplyIsDiscarded(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	slow := host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		entered <- struct{}{}
		<-release
		return host.Reply(host.OK("late"))
	})
	b := newBench(t, map[string]host.Service{"test.slow": slow})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-entered // the request is being served: interrupt its cell now
		cancel()
	}()
	rec, _ := b.run(ctx, `await runtime.request("test.slow")`)
	if rec.Status != wire.StatusInterrupted {
		t.Fatalf("got %s; want interrupted", rec.Status)
	}
	close(release) // the reply to r-1 now arrives, after its cell ended
	rec, _ = b.run(context.Background(), `import asyncio
await asyncio.sleep(0.05)
r = await runtime.inspect()
r["execution_id"], r["request_id"]`)
	if result(rec) != "('c-2', 'r-2')" {
		t.Errorf("got %q; want the second cell's own reply", result(rec))
	}
	req, reply, err := b.store.RequestByID(context.Background(), b.sess.ID, 1)
	if err != nil || req.Method != "test.slow" || reply == nil || string(reply.Value) != `"late"` {
		t.Errorf("the late reply's record: %+v %+v %v", req, reply, err)
	}
}

func TestUnknownMethodAndMalformedRequests(t *testing.T) {
	b := newBench(t, nil)
	rec, _ := b.run(context.Background(), `from kiln.runtime import HostError
codes = []
for call in (lambda: runtime.request("no.such"), lambda: runtime.request("runtime.inspect", extra=1),
             lambda: runtime.request("runtime.wait", seconds=1, bogus=2)):
    try:
        await call()
    except HostError as e:
        codes.append(e.code)
codes`)
	if want := "['unknown_method', 'invalid_request', 'invalid_request']"; result(rec) != want {
		t.Errorf("got %q; want %q", result(rec), want)
	}
}

// call is a request served directly, without a worker.
func call(gen, exec string, live bool) worker.Call {
	return worker.Call{Generation: gen, ExecutionID: exec, RequestID: "r-1", Method: "runtime.inspect",
		Request: jsontext.Value(`{"method":"runtime.inspect"}`), Live: live}
}

func TestScopeRules(t *testing.T) {
	ctx := context.Background()
	st, _ := store.Open(ctx, "", store.Options{})
	defer st.Close()
	sess, _, _ := st.EnsureSession(ctx, "s")
	r := host.New(host.Config{Store: st, Session: sess})
	r.SetGeneration("g-2")
	e, _ := st.StartExecution(ctx, sess.ID, "g-2", "x")
	r.Begin(e.CellID)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		call worker.Call
		want string
	}{
		{"live", ctx, call("g-2", e.CellID, true), ""},
		{"old generation", ctx, call("g-1", e.CellID, true), host.CodeStaleGeneration},
		{"not live", ctx, call("g-2", e.CellID, false), host.CodeExecutionEnded},
		{"scope ended", cancelled, call("g-2", e.CellID, true), host.CodeExecutionEnded},
		{"unknown execution", ctx, call("g-2", "c-99", false), host.CodeUnknownExecution},
	} {
		got := r.Serve(c.ctx, c.call)
		if got.Code != c.want {
			t.Errorf("%s: got %s %s %q; want code %q", c.name, got.Kind, got.Code, got.Message, c.want)
		}
	}
	r.Interrupting(e.CellID)
	if got := r.Serve(ctx, call("g-2", e.CellID, true)); got.Code != host.CodeExecutionInterrupted {
		t.Errorf("interrupted: got %q", got.Code)
	}
	r.End(e.CellID)
	st.EndExecution(ctx, e, store.ExecutionEnd{Status: wire.StatusInterrupted})
	if got := r.Serve(ctx, call("g-2", e.CellID, false)); got.Code != host.CodeExecutionInterrupted {
		t.Errorf("after an interrupted end: got %q", got.Code)
	}
	entries, _ := st.Log(ctx, store.LogFilter{})
	requests, replies := 0, 0
	for _, en := range entries {
		switch en.Kind {
		case store.KindRequest:
			requests++
		case store.KindReply:
			replies++
		}
	}
	if requests != 7 || replies != 7 {
		t.Errorf("recorded %d requests and %d replies; want every one of the 7, refusals included", requests, replies)
	}
}

func TestStamp(t *testing.T) {
	got := host.Stamp(time.Date(2026, 9, 13, 18, 59, 0, 999e6, time.FixedZone("x", 3600)))
	if want := "2026-09-13T17:59:00Z"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}

func TestPendingInputsAreHandedOverAtMostMaxPendingRefsAtATime(t *testing.T) {
	b := newBench(t, nil)
	ctx := context.Background()
	for i := range host.MaxPendingRefs + 1 {
		if _, err := b.store.AppendEvent(ctx, b.sess.ID, store.SourceOperator, i); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := b.run(ctx, `a = len((await runtime.inspect())["pending_inputs"])
b = len((await runtime.wait(None))["inputs"])
c = (await runtime.wait(None))["inputs"]
a, b, c`)
	if want := fmt.Sprintf("(%d, %d, ['event:%d'])", host.MaxPendingRefs, host.MaxPendingRefs, host.MaxPendingRefs+1); result(rec) != want {
		t.Errorf("got %s; want %s", result(rec), want)
	}
}
