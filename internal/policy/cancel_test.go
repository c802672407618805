package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/worker"
)

// TestACallerLeavingEndsNeitherTheDecisionNorItsGeneration: the caller of PlanEvent goes
// away while the hook decides; the hook's own decision is recorded, and its generation
// serves on.
func TestACallerLeavingEndsNeitherTheDecisionNorItsGeneration(t *testing.T) {
	data := dataDir(t)
	st := openStore(t, data)
	sess, _, _ := st.EnsureSession(context.Background(), "s")
	g := newGate(t)
	id := storeRelease(t, data, hooks("gated", g.py, "gate('plan'); return Wake(5)", "return Allow()"))
	if _, err := st.ActivateBehavior(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, data)
	w, err := m.Active().live(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ev, err := st.AppendEvent(context.Background(), sess.ID, SourceDiscordDM, map[string]string{"text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type planned struct {
		d   Decision
		err error
	}
	done := make(chan planned, 1)
	go func() {
		d, err := m.PlanEvent(ctx, ev)
		done <- planned{d, err}
	}()
	g.reached(t)
	cancel()
	g.open(t)
	got := <-done
	if got.err != nil || priority(got.d.Attention) != 5 || got.d.Note != "" {
		t.Errorf("decided %+v, %v; want the hook's wake at 5", got.d.Attention, got.err)
	}
	if recorded, _ := st.EventByID(context.Background(), sess.ID, ev.ID); !strings.Contains(string(recorded.Attention), `"priority":5`) {
		t.Errorf("recorded %s; want the hook's decision", recorded.Attention)
	}
	if w.State() == worker.Dead || m.Active().current.w != w {
		t.Errorf("the generation did not outlive its caller: %v", w.Err())
	}
}
