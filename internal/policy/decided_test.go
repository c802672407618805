package policy

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/store"
)

// TestAnInputDecidedElsewhereIsNotDecidedAgain: two kilns decide one input; the second
// is told the first's decision. Opening a session skips an input another kiln decided
// while it decided the ones before.
func TestAnInputDecidedElsewhereIsNotDecidedAgain(t *testing.T) {
	ctx := context.Background()
	data := dataDir(t)
	st := openStore(t, data)
	sess, _, _ := st.EnsureSession(ctx, "s")
	ev, err := st.AppendEvent(ctx, sess.ID, SourceOperator, map[string]string{"text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	other := openStore(t, data)
	first, err := newManager(t, other, data).PlanEvent(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	second, err := newManager(t, st, data).PlanEvent(ctx, ev) // ev as read before the first decided
	if err != nil || second.Action != first.Action || priority(second.Attention) != priority(first.Attention) {
		t.Errorf("the second kiln: %+v, %v; want the first's decision, %+v", second, err, first)
	}

	g := newGate(t)
	asked := filepath.Join(t.TempDir(), "asked")
	id := storeRelease(t, data, hooks("skips", g.py, `with open(`+strconv.Quote(asked)+`, "a") as f:
        f.write("%d\n" % request.event_id)
    if request.event_id == `+strconv.FormatInt(ev.ID+1, 10)+`:
        gate("first")
    return Wake(5)`, "return Allow()"))
	if _, err := st.ActivateBehavior(ctx, 0, id); err != nil {
		t.Fatal(err)
	}
	var events []store.Event
	for range 2 {
		e, err := st.AppendEvent(ctx, sess.ID, SourceDiscordDM, map[string]string{"text": "hi"})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	m := newManager(t, st, data)
	done := make(chan error, 1)
	go func() { done <- m.PlanUndecided(ctx, sess.ID) }()
	g.reached(t)
	if _, err := other.SetAttention(ctx, sess.ID, events[1].ID, store.Behavior{Epoch: 1, ReleaseID: id},
		map[string]any{"action": "ignore", "reason": "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	g.open(t)
	if err := <-done; err != nil {
		t.Errorf("opening the session: %v", err)
	}
	if data, _ := os.ReadFile(asked); string(data) != strconv.FormatInt(events[0].ID, 10)+"\n" {
		t.Errorf("the hook was asked of %q; want only event %d", data, events[0].ID)
	}
	if e, _ := st.EventByID(ctx, sess.ID, events[1].ID); !strings.Contains(string(e.Attention), "elsewhere") {
		t.Errorf("the input decided elsewhere holds %s", e.Attention)
	}
}
