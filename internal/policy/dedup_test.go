package policy

import (
	"context"
	"sync"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/worker"
)

// TestOneRequestIdentityMakesOneSend: the same execution and request id sent again while
// the first is reviewed waits for it, and gets the same receipt: one effect, one event,
// one speech.
func TestOneRequestIdentityMakesOneSend(t *testing.T) {
	ctx := context.Background()
	data := dataDir(t)
	st := openStore(t, data)
	sess, _, _ := st.EnsureSession(ctx, "s")
	g := newGate(t)
	id := storeRelease(t, data, hooks("review", g.py, "return Wake(1)", "gate('review'); return Allow()"))
	if _, err := st.ActivateBehavior(ctx, 0, id); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, data)
	waiting := make(chan struct{})
	sendWaiting = sync.OnceFunc(func() { close(waiting) })
	t.Cleanup(func() { sendWaiting = nil })
	var mu sync.Mutex
	var said []Receipt
	r := host.New(host.Config{Store: st, Session: sess})
	r.Handle(SendMethod, m.Send(func(text string, rc Receipt) { mu.Lock(); said = append(said, rc); mu.Unlock() }))
	r.SetGeneration("g-1")
	e, _ := st.StartExecution(ctx, sess.ID, "g-1", "x")
	r.Begin(e.CellID)
	m.Pin(e.CellID)
	defer m.Unpin(e.CellID)
	if _, err := m.Pinned(e.CellID).live(ctx); err != nil {
		t.Fatal(err)
	}
	send := func() <-chan answer {
		out := make(chan answer, 1)
		go func() {
			body, _ := json.Marshal(map[string]string{"method": SendMethod, "text": "once"})
			reply := r.Serve(ctx, worker.Call{Generation: "g-1", ExecutionID: e.CellID, RequestID: "r-1",
				Method: SendMethod, Request: jsontext.Value(body), Live: true})
			var rc Receipt
			if reply.Kind == "ok" {
				json.Unmarshal(reply.Value, &rc)
			}
			out <- answer{reply.Kind, reply.Message, rc}
		}()
		return out
	}
	first := send()
	g.reached(t)
	second := send()
	select {
	case <-waiting:
	case got := <-second:
		g.open(t)
		t.Fatalf("the same request again, while the first was reviewed, was answered without waiting for the first: %+v; first %+v", got, <-first)
	}
	g.open(t)
	one, two := <-first, <-second
	if one.kind != "ok" || one.receipt.Status != "confirmed" || two.kind != "ok" || two.receipt.EffectID != one.receipt.EffectID ||
		two.receipt.EventID == nil || *two.receipt.EventID != *one.receipt.EventID {
		t.Errorf("the first got %+v, the second %+v; want one confirmed receipt, twice", one, two)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(said) != 1 {
		t.Errorf("speech told %d times; want once", len(said))
	}
}

// answer is what a send was answered.
type answer struct {
	kind, message string
	receipt       Receipt
}
