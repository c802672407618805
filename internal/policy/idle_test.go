package policy

import (
	"context"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/worker"
)

// currentWorker is p's live hooks worker, or nil when it has none.
func (p *Policy) currentWorker() *worker.Worker {
	p.mu.Lock()
	g := p.current
	p.mu.Unlock()
	if g == nil {
		return nil
	}
	<-g.ready
	return g.w
}

func TestAHooksWorkerStartsAtTheFirstDecisionAndStopsWhenIdle(t *testing.T) {
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: Initial().ID, Idle: 200 * time.Millisecond})
	defer p.Close()
	if w := p.currentWorker(); w != nil {
		t.Fatalf("a hooks worker runs before any decision: generation %s", w.Generation())
	}
	ctx := context.Background()
	for round := 1; round <= 2; round++ {
		if a := p.Plan(ctx, 1, SourceDiscordDM, 1); a.Action != "wake" || priority(a) != 60 || a.Note != "" {
			t.Fatalf("round %d: %+v; want the hook's own wake at 60", round, a)
		}
		w := p.currentWorker()
		if w == nil {
			t.Fatalf("round %d: no hooks worker after a decision", round)
		}
		if got, want := w.Generation(), "h-"+string(rune('0'+round)); got != want {
			t.Fatalf("round %d: generation %s; want %s", round, got, want)
		}
		poll.Until(t, 30*time.Second, func() bool { return p.currentWorker() == nil })
		select {
		case <-w.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the idle hooks worker did not end", round)
		}
	}
}

func TestAHooksWorkerNeverIdleStopsWhenToldNot(t *testing.T) {
	p, err := Start(context.Background(), Config{Python: pythonPath(t), SessionID: "s", ReleaseID: Initial().ID, Idle: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w := p.currentWorker()
	if r := p.Review(context.Background(), 1, "hello"); r.Action != "allow" {
		t.Fatalf("%+v", r)
	}
	p.mu.Lock()
	armed := p.idle != nil
	p.mu.Unlock()
	if armed || p.currentWorker() != w {
		t.Fatal("a policy told never to idle-stop armed its idle timer or changed worker")
	}
}
