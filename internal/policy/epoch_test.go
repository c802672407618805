package policy

import (
	"context"
	"testing"

	"github.com/kilnrt/kiln/internal/store"
)

// TestAnInputIsPlannedByTheReleaseTheEpochNames: another kiln activates a release; the
// next input here is planned by it, not by the release this manager started with, and
// the record names the epoch and release that decided.
func TestAnInputIsPlannedByTheReleaseTheEpochNames(t *testing.T) {
	ctx := context.Background()
	data := dataDir(t)
	st := openStore(t, data)
	sess, _, _ := st.EnsureSession(ctx, "s")
	seven := storeRelease(t, data, hooks("seven", "", "return Wake(7)", "return Allow()"))
	three := storeRelease(t, data, hooks("three", "", "return Wake(3)", "return Allow()"))
	if _, err := st.ActivateBehavior(ctx, 0, seven); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, data)
	other := openStore(t, data) // another kiln process's
	if _, err := other.ActivateBehavior(ctx, 1, three); err != nil {
		t.Fatal(err)
	}
	ev, err := st.AppendEvent(ctx, sess.ID, SourceDiscordDM, map[string]string{"text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.PlanEvent(ctx, ev)
	if err != nil || priority(d.Attention) != 3 || d.Epoch == nil || *d.Epoch != 2 || d.Release != three {
		t.Fatalf("decided %+v (epoch %v, release %.8s), %v; want release three's wake at 3, epoch 2", d.Attention, d.Epoch, d.Release, err)
	}
	recorded, err := st.EventByID(ctx, sess.ID, ev.ID)
	if err != nil || recorded.AttentionBy == nil || *recorded.AttentionBy != (store.Behavior{Epoch: 2, ReleaseID: three}) {
		t.Errorf("recorded %+v, %v; want epoch 2 and release three named", recorded, err)
	}
}
