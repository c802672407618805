package peer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// world is a daemon's sessions as the service sees them: each session a router on one
// record, with every peer method registered; a stopped session tells the service, as the
// daemon does.
type world struct {
	t   *testing.T
	st  *store.Store
	svc *peer.Service

	mu        sync.Mutex
	routers   map[string]*host.Router
	stopped   map[string]string
	delivered map[string][]store.Event
	calls     int
	openErr   error
	// stopping, when set, is called as a session's stop begins, before it is recorded:
	// a stop that takes its time, as a cell's interrupt grace does.
	stopping func(name string)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldAt(t, nil)
}

// newWorldAt is a world whose record keeps time by now (nil: time.Now).
func newWorldAt(t *testing.T, now func() time.Time) *world {
	t.Helper()
	st, err := store.Open(t.Context(), "", store.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &world{t: t, st: st, routers: map[string]*host.Router{}, stopped: map[string]string{}, delivered: map[string][]store.Event{}}
	if w.svc, err = peer.New(peer.Config{Store: st, Sessions: w, Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.svc.Close)
	sess, _, err := st.EnsureSession(t.Context(), "root")
	if err != nil {
		t.Fatal(err)
	}
	w.serve(sess)
	return w
}

func (w *world) serve(sess store.Session) {
	r := host.New(host.Config{Store: w.st, Session: sess})
	r.Register(peer.Methods(w)...)
	r.SetGeneration("g-1")
	w.mu.Lock()
	w.routers[sess.Name] = r
	w.mu.Unlock()
}

// Peers is the world's peer service, as a session's parts name it.
func (w *world) Peers() *peer.Service { return w.svc }

func (w *world) Open(ctx context.Context, _, name string) error {
	if w.openErr != nil {
		return w.openErr
	}
	sess, err := w.st.SessionByName(ctx, name)
	if err != nil {
		return err
	}
	w.serve(sess)
	return nil
}

func (w *world) Deliver(_ context.Context, name string, ev store.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.delivered[name] = append(w.delivered[name], ev)
	return nil
}

func (w *world) Stop(ctx context.Context, name, reason string) error {
	w.mu.Lock()
	stopping := w.stopping
	w.mu.Unlock()
	if stopping != nil {
		stopping(name)
	}
	w.mu.Lock()
	_, was := w.stopped[name]
	w.stopped[name] = reason
	w.mu.Unlock()
	if !was {
		w.svc.SessionStopped(ctx, name, reason)
	}
	return nil
}

func (w *world) Activity(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.routers[name] == nil:
		return ""
	case w.stopped[name] != "":
		return peer.ActivityStopped
	}
	return peer.ActivityIdle
}

// call makes a request of method with params from a cell of session, and returns the
// reply.
func (w *world) call(session, method string, params map[string]any) wire.Reply {
	w.t.Helper()
	return w.callIn(w.t.Context(), session, method, params)
}

// callIn is call from a cell whose time ends with ctx.
func (w *world) callIn(ctx context.Context, session, method string, params map[string]any) wire.Reply {
	w.t.Helper()
	w.mu.Lock()
	r := w.routers[session]
	w.calls++
	cell := fmt.Sprintf("c-%d", w.calls)
	w.mu.Unlock()
	if r == nil {
		w.t.Fatalf("no session %s", session)
	}
	body := map[string]any{"method": method}
	for k, v := range params {
		body[k] = v
	}
	data, err := json.Marshal(body)
	if err != nil {
		w.t.Fatal(err)
	}
	r.Begin(cell)
	defer r.End(cell)
	return r.Serve(ctx, worker.Call{Generation: "g-1", ExecutionID: cell, RequestID: "1", Method: method,
		Request: data, Live: true})
}

// ok is the value of an ok reply, decoded.
func (w *world) ok(session, method string, params map[string]any) map[string]any {
	w.t.Helper()
	reply := w.call(session, method, params)
	if reply.Kind != wire.ReplyOK {
		w.t.Fatalf("%s from %s: %s %s", method, session, reply.Code, reply.Message)
	}
	var v map[string]any
	if err := json.Unmarshal(reply.Value, &v); err != nil {
		w.t.Fatal(err)
	}
	return v
}

// refused checks that method from session is refused with code.
func (w *world) refused(session, method string, params map[string]any, code string) string {
	w.t.Helper()
	reply := w.call(session, method, params)
	if reply.Kind != wire.ReplyError || reply.Code != code {
		w.t.Fatalf("%s from %s: %s %s %s; want %s", method, session, reply.Kind, reply.Code, reply.Message, code)
	}
	return reply.Message
}

func (w *world) open(parent string) string {
	w.t.Helper()
	return w.ok(parent, peer.OpenMethod, map[string]any{"mode": "independent", "evidence": []string{}})["peer_id"].(string)
}

func (w *world) send(parent, peerID, id, content string) map[string]any {
	w.t.Helper()
	return w.ok(parent, peer.SendMethod, map[string]any{"peer_id": peerID, "request_id": id, "content": content, "evidence": []string{}})
}

// events are session's inputs.
func (w *world) events(session string) []store.Event {
	w.t.Helper()
	sess, err := w.st.SessionByName(w.t.Context(), session)
	if err != nil {
		w.t.Fatal(err)
	}
	evs, err := w.st.Undelivered(w.t.Context(), sess.ID, 1000)
	if err != nil {
		w.t.Fatal(err)
	}
	return evs
}

// log is session's journal.
func (w *world) log(session string) []store.Entry {
	w.t.Helper()
	sess, err := w.st.SessionByName(w.t.Context(), session)
	if err != nil {
		w.t.Fatal(err)
	}
	entries, err := w.st.Log(w.t.Context(), store.LogFilter{Session: sess.ID})
	if err != nil {
		w.t.Fatal(err)
	}
	return entries
}

// kinds are the peer records session's journal holds, in order.
func (w *world) kinds(session string) []string {
	w.t.Helper()
	var out []string
	for _, e := range w.log(session) {
		if strings.HasPrefix(e.Kind, "peer.") {
			out = append(out, e.Kind)
		}
	}
	return out
}

// records are the bodies of session's peer records of kind, in order.
func (w *world) records(session, kind string) []jsontext.Value {
	w.t.Helper()
	var out []jsontext.Value
	for _, e := range w.log(session) {
		if rec, ok := e.Record.(store.PeerRecord); ok && e.Kind == kind {
			out = append(out, rec.Body)
		}
	}
	return out
}

func TestRequestAndResult(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	if p != "root.p1" {
		t.Fatalf("peer id %q", p)
	}
	if got := w.send("root", p, "req-1", "add 2 and 3"); got["state"] != peer.StateSubmitted || got["peer_id"] != p {
		t.Fatalf("receipt %v", got)
	}
	in := w.events(p)
	if len(in) != 1 || in[0].Source != "peer" ||
		string(in[0].Payload) != `{"text":"add 2 and 3","peer_request":{"id":"req-1","session":"root"}}` {
		t.Fatalf("the peer's inputs: %+v", in)
	}
	poll.Until(t, 10*time.Second, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.delivered[p]) == 1 })
	if got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1", "wait_ms": 0}); got["state"] != peer.StateSubmitted {
		t.Fatalf("result before an answer: %v", got)
	}
	done := make(chan map[string]any, 1)
	go func() {
		done <- w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1", "wait_ms": 60000})
	}()
	if got := w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": map[string]int{"sum": 5}}); got["state"] != peer.StateCompleted {
		t.Fatalf("submit: %v", got)
	}
	got := <-done
	if got["state"] != peer.StateCompleted || fmt.Sprint(got["result"]) != "map[sum:5]" {
		t.Fatalf("the waited result: %v", got)
	}
	back := w.events("root")
	if len(back) != 1 || back[0].Source != "peer" ||
		string(back[0].Payload) != `{"text":"{\"sum\":5}","peer_result":{"id":"req-1","session":"root.p1","state":"completed"}}` {
		t.Fatalf("the parent's inputs: %+v", back)
	}
	want := "peer.opened peer.request peer.result"
	for _, s := range []string{"root", p} {
		if got := strings.Join(w.kinds(s), " "); got != want {
			t.Errorf("%s's peer records: %s; want %s", s, got, want)
		}
	}
}

func TestSendAndSubmitAreIdempotent(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "req-1", "a")
	w.send("root", p, "req-1", "a")
	if n := len(w.events(p)); n != 1 {
		t.Fatalf("the same request twice made %d inputs", n)
	}
	w.refused("root", peer.SendMethod, map[string]any{"peer_id": p, "request_id": "req-1", "content": "b", "evidence": []string{}}, peer.CodeConflict)
	w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": map[string]any{"a": 1, "b": 2}})
	// The same value, its members in another order, is the same result.
	w.call(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": jsontext.Value(`{"b":2,"a":1}`)})
	if n := len(w.events("root")); n != 1 {
		t.Fatalf("the same result twice made %d inputs", n)
	}
	w.refused(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": 3}, peer.CodeConflict)
	w.refused(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": map[string]any{"a": 1, "b": 2}, "state": "failed"}, peer.CodeConflict)
}

func TestAliasesRecordAlike(t *testing.T) {
	w := newWorld(t)
	a := w.ok("root", peer.OpenAlias, map[string]any{"mode": "independent", "evidence": []string{}})["peer_id"].(string)
	b := w.open("root")
	w.ok("root", peer.SendAlias, map[string]any{"peer_id": a, "request_id": "r-a", "content": "x", "evidence": []string{}})
	w.send("root", b, "r-b", "x")
	ka, kb := w.kinds(a), w.kinds(b)
	if strings.Join(ka, " ") != strings.Join(kb, " ") || len(ka) != 2 {
		t.Fatalf("records by alias %v, by name %v", ka, kb)
	}
	ea, eb := w.events(a), w.events(b)
	if len(ea) != 1 || len(eb) != 1 || strings.Replace(string(ea[0].Payload), "r-a", "r-b", 1) != string(eb[0].Payload) {
		t.Fatalf("inputs by alias %s, by name %s", ea[0].Payload, eb[0].Payload)
	}
}

func TestOpenRefusesOtherModes(t *testing.T) {
	w := newWorld(t)
	msg := w.refused("root", peer.OpenMethod, map[string]any{"mode": "forked", "evidence": []string{}}, host.CodeInvalidRequest)
	if !strings.Contains(msg, `"independent"`) {
		t.Fatalf("the refusal does not name the supported mode: %s", msg)
	}
	w.refused("root", peer.OpenMethod, map[string]any{"mode": "independent", "evidence": []string{"event:999"}}, host.CodeInvalidRequest)
}

func TestScope(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "req-1", "a")
	other, _, err := w.st.EnsureSession(t.Context(), "other")
	if err != nil {
		t.Fatal(err)
	}
	w.serve(other)
	// Another session sees nothing of root's peer or request.
	for method, params := range map[string]map[string]any{
		peer.SendMethod:   {"peer_id": p, "request_id": "x", "content": "a", "evidence": []string{}},
		peer.GetMethod:    {"peer_id": p},
		peer.StopMethod:   {"peer_id": p, "drain": false},
		peer.ResultMethod: {"request_id": "req-1", "wait_ms": 0},
		peer.CancelMethod: {"request_id": "req-1"},
		// a request id the caller never sent, or not to it
		peer.SubmitResultMethod: {"request_id": "req-1", "result": 1},
	} {
		w.refused("other", method, params, peer.CodeNotFound)
	}
	if got := w.ok("other", peer.ListMethod, nil); fmt.Sprint(got["peers"]) != "[]" {
		t.Fatalf("other's peers: %v", got)
	}
	// The peer addresses its parent only through results: root is no peer of its own.
	w.refused(p, peer.SendMethod, map[string]any{"peer_id": "root", "request_id": "up", "content": "a", "evidence": []string{}}, peer.CodeNotFound)
	w.refused(p, peer.ResultMethod, map[string]any{"request_id": "req-1", "wait_ms": 0}, peer.CodeNotFound)
	// The parent cannot answer its own request.
	w.refused("root", peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": 1}, peer.CodeNotFound)
}

func TestCancel(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "req-1", "a")
	got := w.ok("root", peer.CancelMethod, map[string]any{"request_id": "req-1"})
	if got["state"] != peer.StateCanceled || !strings.Contains(got["note"].(string), "cancel requested while submitted") {
		t.Fatalf("cancel: %v", got)
	}
	in := w.events(p)
	if len(in) != 2 || !strings.Contains(string(in[1].Payload), `"peer_cancel":{"id":"req-1","session":"root"}`) {
		t.Fatalf("the peer's inputs: %+v", in)
	}
	w.refused(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": 1}, peer.CodeCanceled)
	if got := w.ok("root", peer.CancelMethod, map[string]any{"request_id": "req-1"}); got["state"] != peer.StateCanceled {
		t.Fatalf("cancel again: %v", got)
	}
	// Once the peer's agent took it, the request is working, and cancel says so.
	w.send("root", p, "req-2", "b")
	sess, _ := w.st.SessionByName(t.Context(), p)
	evs := w.events(p)
	if err := w.st.Update(t.Context(), func(tx *store.Tx) error { return tx.Deliver(sess.ID, evs[len(evs)-1].ID) }); err != nil {
		t.Fatal(err)
	}
	if got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-2", "wait_ms": 0}); got["state"] != peer.StateWorking {
		t.Fatalf("a taken request: %v", got)
	}
	if got := w.ok("root", peer.CancelMethod, map[string]any{"request_id": "req-2"}); !strings.Contains(got["note"].(string), "while working") {
		t.Fatalf("cancel of a working request: %v", got)
	}
	// A request completed is not canceled.
	w.send("root", p, "req-3", "c")
	w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-3", "result": "done"})
	if got := w.ok("root", peer.CancelMethod, map[string]any{"request_id": "req-3"}); got["state"] != peer.StateCompleted {
		t.Fatalf("cancel of a completed request: %v", got)
	}
}

func TestStopWithoutDrainCancelsAndStops(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "req-1", "a")
	got := w.ok("root", peer.StopMethod, map[string]any{"peer_id": p, "drain": false})
	if got["state"] != peer.PeerStopped || got["canceled_requests"] != 1.0 {
		t.Fatalf("stop: %v", got)
	}
	if w.stopped[p] == "" {
		t.Fatal("the peer's session was not stopped")
	}
	if got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1"}); got["state"] != peer.StateCanceled {
		t.Fatalf("the request of a stopped peer: %v", got)
	}
	w.refused("root", peer.SendMethod, map[string]any{"peer_id": p, "request_id": "req-2", "content": "b", "evidence": []string{}}, peer.CodePeerStopped)
	if got := w.ok("root", peer.GetMethod, map[string]any{"peer_id": p}); got["state"] != peer.ActivityStopped {
		t.Fatalf("get: %v", got)
	}
	if got := w.kinds("root"); got[len(got)-1] != "peer.stopped" {
		t.Fatalf("root's records: %v", got)
	}
}

func TestStopWithDrainWaitsForOpenRequests(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "req-1", "a")
	got := w.ok("root", peer.StopMethod, map[string]any{"peer_id": p, "drain": true})
	if got["state"] != peer.PeerDraining || got["open_requests"] != 1.0 {
		t.Fatalf("drain: %v", got)
	}
	w.refused("root", peer.SendMethod, map[string]any{"peer_id": p, "request_id": "req-2", "content": "b", "evidence": []string{}}, peer.CodePeerStopped)
	if got := w.ok("root", peer.GetMethod, map[string]any{"peer_id": p}); got["draining"] != true || got["state"] != peer.ActivityIdle {
		t.Fatalf("a draining peer: %v", got)
	}
	w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": "done"})
	poll.Until(t, 10*time.Second, func() bool { return w.Activity(p) == peer.ActivityStopped })
	if got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1"}); got["state"] != peer.StateCompleted {
		t.Fatalf("the drained request: %v", got)
	}
	// A peer with nothing open stops at once.
	q := w.open("root")
	if got := w.ok("root", peer.StopMethod, map[string]any{"peer_id": q, "drain": true}); got["state"] != peer.PeerStopped {
		t.Fatalf("drain of an idle peer: %v", got)
	}
}

func TestStoppingAParentStopsItsPeers(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	pp := w.open(p)
	w.send("root", p, "req-1", "a")
	w.send(p, pp, "req-1", "b") // request ids are each parent's own
	w.Stop(t.Context(), "root", "stopped by a client")
	for _, s := range []string{p, pp} {
		if w.Activity(s) != peer.ActivityStopped {
			t.Errorf("%s was not stopped", s)
		}
	}
	got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1"})
	if got["state"] != peer.StateCanceled || !strings.Contains(got["detail"].(string), "its parent root stopped") {
		t.Fatalf("the request of a peer stopped with its parent: %v", got)
	}
}

func TestOpenThatFailsLeavesThePeerStopped(t *testing.T) {
	w := newWorld(t)
	w.openErr = fmt.Errorf("no python")
	msg := w.refused("root", peer.OpenMethod, map[string]any{"mode": "independent", "evidence": []string{}}, peer.CodePeerUnavailable)
	if !strings.Contains(msg, "no python") {
		t.Fatalf("refusal: %s", msg)
	}
	w.openErr = nil
	got := w.ok("root", peer.ListMethod, nil)["peers"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["state"] != peer.ActivityStopped {
		t.Fatalf("peers: %v", got)
	}
	if p := w.open("root"); p != "root.p2" {
		t.Fatalf("the next peer: %s", p)
	}
}

func TestBoundsAtTheLimitAndOnePast(t *testing.T) {
	t.Run("peers", func(t *testing.T) {
		w := newWorld(t)
		for range peer.MaxPeers {
			w.open("root")
		}
		w.refused("root", peer.OpenMethod, map[string]any{"mode": "independent", "evidence": []string{}}, peer.CodePeerLimit)
		w.ok("root", peer.StopMethod, map[string]any{"peer_id": "root.p1", "drain": false})
		w.open("root") // a stopped peer counts no more
	})
	t.Run("depth", func(t *testing.T) {
		w := newWorld(t)
		s := "root"
		for range peer.MaxDepth {
			s = w.open(s)
		}
		if got := w.ok("root", peer.GetMethod, map[string]any{"peer_id": "root.p1"}); got["depth"] != 1.0 {
			t.Fatalf("the first peer: %v", got)
		}
		w.refused(s, peer.OpenMethod, map[string]any{"mode": "independent", "evidence": []string{}}, peer.CodeDepthLimit)
	})
	t.Run("open requests", func(t *testing.T) {
		w := newWorld(t)
		p := w.open("root")
		for i := range peer.MaxOpenRequests {
			w.send("root", p, fmt.Sprintf("r-%d", i), "a")
		}
		w.refused("root", peer.SendMethod, map[string]any{"peer_id": p, "request_id": "over", "content": "a", "evidence": []string{}}, peer.CodeOpenRequestLimit)
		w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "r-0", "result": 1})
		w.send("root", p, "over", "a")
	})
	t.Run("content", func(t *testing.T) {
		w := newWorld(t)
		p := w.open("root")
		w.send("root", p, "at", strings.Repeat("a", peer.MaxContentBytes))
		w.refused("root", peer.SendMethod, map[string]any{"peer_id": p, "request_id": "past",
			"content": strings.Repeat("a", peer.MaxContentBytes+1), "evidence": []string{}}, host.CodeInvalidRequest)
	})
	t.Run("result", func(t *testing.T) {
		w := newWorld(t)
		p := w.open("root")
		w.send("root", p, "at", "a")
		w.send("root", p, "past", "a")
		// a JSON string of exactly MaxResultBytes bytes, quotes included
		at := `"` + strings.Repeat("a", peer.MaxResultBytes-2) + `"`
		w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "at", "result": jsontext.Value(at)})
		w.refused(p, peer.SubmitResultMethod, map[string]any{"request_id": "past", "result": jsontext.Value(at[:1] + "a" + at[1:])}, host.CodeInvalidRequest)
		// The parent's input names a result this large, which peer.result carries whole.
		back := w.events("root")
		if len(back) != 1 || !strings.Contains(string(back[0].Payload), fmt.Sprintf("a result of %d bytes", peer.MaxResultBytes)) {
			t.Fatalf("the parent's input: %.200s", back[0].Payload)
		}
		if got := w.call("root", peer.ResultMethod, map[string]any{"request_id": "at"}); got.Kind != wire.ReplyOK || len(got.Value) < peer.MaxResultBytes {
			t.Fatalf("peer.result of the largest result: %s %s", got.Code, got.Message)
		}
	})
	t.Run("evidence", func(t *testing.T) {
		w := newWorld(t)
		refs := make([]string, peer.MaxEvidenceRefs+1)
		for i := range refs {
			refs[i] = "session:root"
		}
		msg := w.refused("root", peer.OpenMethod, map[string]any{"mode": "independent", "evidence": refs}, host.CodeInvalidRequest)
		if !strings.Contains(msg, fmt.Sprintf("at most %d evidence refs", peer.MaxEvidenceRefs)) {
			t.Fatalf("refusal: %s", msg)
		}
	})
	t.Run("wait", func(t *testing.T) {
		w := newWorld(t)
		p := w.open("root")
		w.send("root", p, "r", "a")
		w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "r", "result": 1})
		w.ok("root", peer.ResultMethod, map[string]any{"request_id": "r", "wait_ms": peer.MaxWaitMS})
		w.refused("root", peer.ResultMethod, map[string]any{"request_id": "r", "wait_ms": peer.MaxWaitMS + 1}, host.CodeInvalidRequest)
	})
}

// A peer that stops on its own — idle, or stopped by a client — fails its open requests,
// and the parent is told of each by an input.
func TestAPeerThatStopsFailsItsRequests(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "req-1", "a")
	w.Stop(t.Context(), p, "idle for 1h0m0s (its idle timeout)")
	got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1"})
	if got["state"] != peer.StateFailed || !strings.Contains(got["detail"].(string), "idle for 1h0m0s") {
		t.Fatalf("the request: %v", got)
	}
	back := w.events("root")
	if len(back) != 1 || !strings.Contains(string(back[0].Payload), `"state":"failed"`) {
		t.Fatalf("the parent's inputs: %+v", back)
	}
}

// The model calls of a session's peers, and of theirs, are charged to it.
func TestPeersCostIsChargedToTheirParent(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	pp := w.open(p)
	for name, cost := range map[string]int{p: 70, pp: 30} {
		sess, err := w.st.SessionByName(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.st.AppendAgentRecord(t.Context(), sess.ID, store.KindModelCall, 1, map[string]any{"turn": 1, "cost_micros": cost}); err != nil {
			t.Fatal(err)
		}
	}
	root, _ := w.st.SessionByName(t.Context(), "root")
	mid, _ := w.st.SessionByName(t.Context(), p)
	if got := w.svc.Charged(t.Context(), root.ID); got != 100 {
		t.Errorf("root is charged %d µ$; want its peer's 70 and its peer's peer's 30", got)
	}
	if got := w.svc.Charged(t.Context(), mid.ID); got != 30 {
		t.Errorf("%s is charged %d µ$; want 30", p, got)
	}
	if got := w.ok("root", peer.GetMethod, map[string]any{"peer_id": p})["usage"].(map[string]any); got["cost_micros"] != 70.0 {
		t.Errorf("peer.get's usage: %v", got)
	}
}

// A peer that needs more asks its parent with input_required; the parent answers by
// sending the same request id again with the input; the request goes on to its result.
func TestInputRequired(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "req-1", "fix the bug")
	w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": "which file?", "state": "input_required"})
	w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": "which file?", "state": "input_required"})
	w.refused(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": "done"}, peer.CodeConflict)
	if got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1", "wait_ms": 60000}); got["state"] != peer.StateInputRequired || got["result"] != "which file?" {
		t.Fatalf("the question: %v", got)
	}
	back := w.events("root")
	if len(back) != 1 || !strings.Contains(string(back[0].Payload), `"state":"input_required"`) {
		t.Fatalf("the parent's inputs: %+v", back)
	}
	// The answer cites the question's input as evidence: the request now holds the
	// answer's content and evidence, as its record and the peer's input say.
	ref := fmt.Sprintf("event:%d", back[0].ID)
	answer := map[string]any{"peer_id": p, "request_id": "req-1", "content": "main.go", "evidence": []string{ref}}
	if got := w.ok("root", peer.SendMethod, answer); got["state"] != peer.StateSubmitted {
		t.Fatalf("the answer: %v", got)
	}
	w.ok("root", peer.SendMethod, answer) // the same answer again is the same receipt
	w.refused("root", peer.SendMethod, map[string]any{"peer_id": p, "request_id": "req-1", "content": "other.go", "evidence": []string{}}, peer.CodeConflict)
	w.refused("root", peer.SendMethod, map[string]any{"peer_id": p, "request_id": "req-1", "content": "main.go", "evidence": []string{}}, peer.CodeConflict)
	in := w.events(p)
	if len(in) != 2 || !strings.Contains(string(in[1].Payload), `"text":"main.go","peer_request":{"id":"req-1","session":"root"},"evidence":["`+ref+`"]`) {
		t.Fatalf("the peer's inputs: %+v", in)
	}
	pr, err := w.st.PeerByName(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := w.st.PeerRequests(t.Context(), pr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 1 || reqs[0].Content != "main.go" || fmt.Sprint(reqs[0].Evidence) != "["+ref+"]" || reqs[0].InputEventID != in[1].ID {
		t.Fatalf("the request after its answer: %+v", reqs)
	}
	recs := w.records(p, store.KindPeerRequest)
	if len(recs) != 2 || !strings.Contains(string(recs[0]), `"evidence":[]`) || !strings.Contains(string(recs[1]), `"evidence":["`+ref+`"]`) {
		t.Fatalf("the peer.request records: %s", recs)
	}
	w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": "req-1", "result": "fixed"})
	if got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "req-1"}); got["state"] != peer.StateCompleted || got["result"] != "fixed" {
		t.Fatalf("the result: %v", got)
	}
}

// A peer cannot make its parent's view of it too large to read: with every request it
// may have open asking a question, together larger than a frame (and each as large as
// a result may be, bar the test's time), peer.get and peer.list answer, each open
// request by its state; peer.result reads a question.
func TestAPeersQuestionsLeaveItsSummarySmall(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	size := 2*wire.MaxFrameSize/peer.MaxOpenRequests + 2
	question := jsontext.Value(`"` + strings.Repeat("?", size-2) + `"`)
	for i := range peer.MaxOpenRequests {
		id := fmt.Sprintf("r-%d", i)
		w.send("root", p, id, "a")
		w.ok(p, peer.SubmitResultMethod, map[string]any{"request_id": id, "result": question, "state": peer.StateInputRequired})
	}
	for method, params := range map[string]map[string]any{peer.GetMethod: {"peer_id": p}, peer.ListMethod: nil} {
		reply := w.call("root", method, params)
		if reply.Kind != wire.ReplyOK || len(reply.Value) > peer.MaxInlineResultBytes {
			t.Fatalf("%s: %s %s (%d bytes)", method, reply.Code, reply.Message, len(reply.Value))
		}
		if n := strings.Count(string(reply.Value), `"state":"input_required"`); n != peer.MaxOpenRequests {
			t.Fatalf("%s shows %d requests asking for input: %s", method, n, reply.Value)
		}
	}
	if got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": "r-0"}); len(got["result"].(string)) != size-2 {
		t.Fatalf("peer.result of a question: %d bytes", len(got["result"].(string)))
	}
}

// peer.result waits no longer than the cell that asks: once the cell's time is up, it
// answers the request's state as it is, whatever its wait_ms.
func TestResultWaitsNoLongerThanItsCell(t *testing.T) {
	w := newWorld(t)
	p := w.open("root")
	w.send("root", p, "r", "a")
	// A cell whose time ended before its request was served is refused instead; a
	// longer one is tried then.
	for cell := 50 * time.Millisecond; ; cell *= 2 {
		ctx, cancel := context.WithTimeout(t.Context(), cell)
		reply := w.callIn(ctx, "root", peer.ResultMethod, map[string]any{"request_id": "r", "wait_ms": peer.MaxWaitMS})
		cancel()
		if reply.Kind == wire.ReplyError && cell < time.Minute {
			continue
		}
		if reply.Kind != wire.ReplyOK || !strings.Contains(string(reply.Value), `"state":"submitted"`) {
			t.Fatalf("peer.result at its cell's end: %s %s %s", reply.Code, reply.Message, reply.Value)
		}
		return
	}
}

// A draining peer whose open requests do not end by DrainTimeout after its drain began
// is stopped then, what is left canceled; before that it drains on. The record's clock
// says when each drain began: DrainTimeout ago and a moment more, and a moment less.
func TestADrainStopsThePeerAtItsTimeout(t *testing.T) {
	var mu sync.Mutex
	var ago time.Duration
	w := newWorldAt(t, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(-ago)
	})
	drain := func(since time.Duration) string {
		mu.Lock()
		ago = since
		mu.Unlock()
		p := w.open("root")
		w.send("root", p, p+"-r", "a")
		if got := w.ok("root", peer.StopMethod, map[string]any{"peer_id": p, "drain": true}); got["state"] != peer.PeerDraining {
			t.Fatalf("drain: %v", got)
		}
		return p
	}
	within := drain(peer.DrainTimeout - time.Minute)
	past := drain(peer.DrainTimeout + time.Millisecond)
	poll.Until(t, 10*time.Second, func() bool { return w.Activity(past) == peer.ActivityStopped })
	got := w.ok("root", peer.ResultMethod, map[string]any{"request_id": past + "-r"})
	if got["state"] != peer.StateCanceled || !strings.Contains(got["detail"].(string), "its drain passed 10m0s") {
		t.Fatalf("the request of a peer past its drain: %v", got)
	}
	if got := w.ok("root", peer.GetMethod, map[string]any{"peer_id": within}); got["draining"] != true || w.Activity(within) == peer.ActivityStopped {
		t.Fatalf("a peer within its drain: %v", got)
	}
}

// A stopping parent stops its peers at once, not one after another: a peer whose cell
// takes its interrupt grace to stop holds up none of the others, so stopping a tree of
// peers takes a grace or so a level, not one a session.
func TestAParentStopsItsPeersTogether(t *testing.T) {
	w := newWorld(t)
	peers := []string{w.open("root"), w.open("root"), w.open("root")}
	entered, release := make(chan string, len(peers)), make(chan struct{})
	w.mu.Lock()
	w.stopping = func(name string) {
		if name != "root" {
			entered <- name
			<-release
		}
	}
	w.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		w.Stop(context.Background(), "root", "stopped by a client")
	}()
	timeout := time.After(30 * time.Second)
	for range peers {
		select {
		case <-entered:
		case <-timeout:
			close(release)
			<-stopped
			t.Fatal("a peer's stop waited for another's to end")
		}
	}
	close(release)
	<-stopped
	for _, p := range peers {
		if w.Activity(p) != peer.ActivityStopped {
			t.Errorf("%s was not stopped", p)
		}
	}
}
