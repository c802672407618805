package kiln_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
)

// TestACellKeepsItsPolicyThroughAnActivation: a cell that activates a release which
// holds every send still has its own sends reviewed by the policy it started with; the
// next cell uses the new one; and the workbench's generation is untouched.
func TestACellKeepsItsPolicyThroughAnActivation(t *testing.T) {
	data, src := releaseData(t), t.TempDir()
	os.WriteFile(filepath.Join(src, "manifest.json"), []byte(`{"version":1,"hooks":{`+
		`"attention.plan":"holdall:attention","delivery.review":"holdall:delivery"}}`), 0o600)
	os.WriteFile(filepath.Join(src, "holdall.py"), []byte("from kiln_hooks import Hold, Wake\n\n"+
		"def attention(request, context):\n    return Wake(100)\n\n"+
		"def delivery(request, context):\n    return Hold('held by the new release')\n"), 0o600)
	snap, err := release.Read(src)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := release.Store(data, snap)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	got := value(t, wb, `send = lambda text: runtime.request("local.send", text=text)
first = (await send("one"))["status"]
epoch = (await runtime.request("behavior.activate", path=`+"'"+dir+"'"+`, expected_epoch=0))["epoch"]
second = (await send("two"))["status"]
first, epoch, second`)
	if got != "('confirmed', 1, 'confirmed')" {
		t.Errorf("within the activating cell: %s", got)
	}
	rec, err := wb.Execute(context.Background(), `r = await runtime.request("local.send", text="three")
r["status"], r["reason"]`)
	if err != nil || rec.Output[0].Text != "('held', 'held by the new release')" {
		t.Errorf("the next cell: %v %+v", err, rec)
	}
	if rec.Generation != "g-1" {
		t.Errorf("the activation restarted the workbench: generation %s", rec.Generation)
	}
}

// releaseData is a temporary data directory, its read-only releases included in its
// removal.
func releaseData(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() { release.RemoveAll(dir) })
	return dir
}

// TestAnInputFollowsAnActivationMadeElsewhere: another kiln activates a release while a
// workbench is open; the workbench's next input is decided by that release, before any
// cell runs, and its record names the epoch and the release.
func TestAnInputFollowsAnActivationMadeElsewhere(t *testing.T) {
	t.Parallel()
	ctx, data := context.Background(), releaseData(t)
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{DataDir: data, Workspace: t.TempDir(), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	r, err := admin.BuildRelease(data, policySource(t, "elsewhere", "held"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ActivateRelease(ctx, data, r.ID, 0, admin.PolicyOptions{}); err != nil {
		t.Fatal(err)
	}
	id, err := wb.Input(ctx, "hi")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenDir(ctx, data, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.SessionByName(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := st.EventByID(ctx, sess.ID, id)
	if err != nil || ev.AttentionBy == nil || ev.AttentionBy.Epoch != 1 || ev.AttentionBy.ReleaseID != r.ID {
		var by store.Behavior
		if ev.AttentionBy != nil {
			by = *ev.AttentionBy
		}
		t.Errorf("input %d decided by %+v, %v; want epoch 1, release %s", id, by, err, r.ID)
	}
}
