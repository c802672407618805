package policy

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/worker"
)

// dataDir is a temporary data directory, its read-only releases included in its removal.
func dataDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() { release.RemoveAll(dir) })
	return dir
}

// TestTheInitialReleaseMatchesItsFixture: kiln's initial policy is a release tree whose
// identity, computed by the release package, is the one testdata/behavior.json fixes, and
// the one the record names as epoch 0's release.
func TestTheInitialReleaseMatchesItsFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "behavior.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		InitialRelease string   `json:"initial_release"`
		Files          []string `json:"files"`
	}
	if err := json.Unmarshal(data, &fixture); err != nil {
		t.Fatal(err)
	}
	snap := Initial()
	var names []string
	for _, f := range snap.Files {
		names = append(names, f.Name)
	}
	if snap.ID != fixture.InitialRelease || snap.ID != release.Identity(snap.Files) || strings.Join(names, " ") != strings.Join(fixture.Files, " ") {
		t.Errorf("the initial release is %s of %q; the fixture says %s of %q", snap.ID, names, fixture.InitialRelease, fixture.Files)
	}
	if snap.ID != store.InitialReleaseID {
		t.Errorf("the initial release is %s; the record names %s as epoch 0's", snap.ID, store.InitialReleaseID)
	}
	if _, err := release.ReadManifest(snap); err != nil {
		t.Error(err)
	}
	p := New(Config{ReleaseID: snap.ID})
	if h, err := p.Handlers(); err != nil || h["attention.plan"] != "kiln_defaults:attention" {
		t.Errorf("its handlers: %v %v", h, err)
	}
}

const holdingHooks = `from kiln_hooks import Hold, Wake

def attention(request, context):
    return Wake(50)

def delivery(request, context):
    return Hold("held by the release")
`

const holdingManifest = `{"version":1,"hooks":{"attention.plan":"holding:attention","delivery.review":"holding:delivery"}}`

// TestAStoredReleaseAlteredOnDiskIsRefusedAtEveryLoad: a stored release is read-only, and
// when its tree is altered anyway the next generation refuses it: sends are held saying
// why, operator input still wakes, and a manager opened afterwards still works.
func TestAStoredReleaseAlteredOnDiskIsRefusedAtEveryLoad(t *testing.T) {
	ctx := context.Background()
	data := dataDir(t)
	st := openStore(t, data)
	id := storeRelease(t, data, map[string]string{"manifest.json": holdingManifest, "holding.py": holdingHooks})
	hooks := filepath.Join(release.Dir(data, id), "holding.py")
	if info, err := os.Stat(hooks); err != nil || info.Mode().Perm() != 0o444 {
		t.Fatalf("a stored release file: %v %v; want mode 0444", info.Mode(), err)
	}
	m, err := NewManager(ctx, st, data, Config{Python: pythonPath(t), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Activate(ctx, release.Dir(data, id), 0); err != nil {
		t.Fatal(err)
	}
	p := m.Active()
	if r := p.Review(ctx, 1, "hi"); r.Reason != "held by the release" {
		t.Fatalf("before: %+v", r)
	}

	os.Chmod(hooks, 0o644) // its owner may, as a cell may
	f, err := os.OpenFile(hooks, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\nfrom kiln_hooks import Allow\n\ndef delivery(request, context):\n    return Allow()\n")
	f.Close()
	w := p.current.w
	if err := syscall.Kill(w.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()

	if r := p.Review(ctx, 2, "hi"); r.Action != "hold" || !strings.Contains(r.Reason, "stored release is corrupt") {
		t.Errorf("a send after the release was altered: %+v; want held, the refusal named", r)
	}
	if a := p.Plan(ctx, 3, SourceOperator, 1); a.Action != "wake" || priority(a) != TopPriority || !strings.Contains(a.Note, "stored release is corrupt") {
		t.Errorf("operator input after the release was altered: %+v", a)
	}
	if _, err := p.Handlers(); !errors.Is(err, ErrInvalidRelease) {
		t.Errorf("its handlers: %v", err)
	}
	again, err := NewManager(ctx, st, data, Config{Python: pythonPath(t), SessionID: "s"})
	if err != nil {
		t.Fatalf("a manager opened on the altered release: %v", err)
	}
	defer again.Close()
	if r := again.Active().Review(ctx, 4, "hi"); r.Action != "hold" || !strings.Contains(r.Reason, "stored release is corrupt") {
		t.Errorf("a fresh manager's send: %+v", r)
	}
}

// TestTheBudgetIncludesTheStart: a release that takes 1.5 s to import and a hook that
// takes 1.2 s more is out of its budget; the start counts against it.
func TestTheBudgetIncludesTheStart(t *testing.T) {
	data := dataDir(t)
	id := storeRelease(t, data, map[string]string{"manifest.json": holdingManifest, "holding.py": `import time
from kiln_hooks import Allow, Wake

time.sleep(1.5)

def attention(request, context):
    return Wake(50)

def delivery(request, context):
    time.sleep(1.2)
    return Allow()
`})
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: id, DataDir: data})
	defer p.Close()
	if r := p.Review(context.Background(), 1, "hi"); r.Action != "hold" || !strings.Contains(r.Reason, "budget") {
		t.Errorf("a review answered after 2.7 s: %+v; want held for its budget", r)
	}
}

// TestPlanInputIsCheckedBeforeTheHookIsAsked: an event id that is not positive, or a
// negative receipt time, is not handed to the hook; the decision falls back, saying why.
func TestPlanInputIsCheckedBeforeTheHookIsAsked(t *testing.T) {
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: Initial().ID})
	defer p.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		event, at int64
		source    string
		action    string
		note      string
	}{
		{0, 1, SourceDiscordDM, "defer", "event_id must be > 0, got 0"},
		{-3, 1, SourceOperator, "wake", "event_id must be > 0, got -3"},
		{1, -1, SourceDiscordDM, "defer", "received_at_ms must be >= 0, got -1"},
		{1, 0, SourceDiscordDM, "wake", ""},
	} {
		a := p.Plan(ctx, tt.event, tt.source, tt.at)
		if a.Action != tt.action || tt.note == "" && a.Note != "" || !strings.Contains(a.Note, tt.note) {
			t.Errorf("event %d at %d from %s: %+v; want %s, note %q", tt.event, tt.at, tt.source, a, tt.action, tt.note)
		}
	}
	if r := p.Review(ctx, 0, "hi"); r.Action != "hold" || !strings.Contains(r.Reason, "effect_id must be > 0") {
		t.Errorf("a review of effect 0: %+v", r)
	}
}

// TestAStartOutlivingItsBudgetGoesOn: a release that takes longer than the budget to
// import has its first decision fall back, but its start is not thrown away: once it is
// ready, decisions are its own. Its private copy is read-only, and removed with it.
func TestAStartOutlivingItsBudgetGoesOn(t *testing.T) {
	data := dataDir(t)
	id := storeRelease(t, data, map[string]string{"manifest.json": holdingManifest, "holding.py": "import time\n" +
		"time.sleep(2.5)\n" + holdingHooks})
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: id, DataDir: data})
	ctx := context.Background()
	if r := p.Review(ctx, 1, "hi"); r.Action != "hold" || !strings.Contains(r.Reason, "did not start within the budget") {
		t.Errorf("a review while the release imports: %+v", r)
	}
	w, err := p.live(ctx) // the same start, now ready
	if err != nil {
		t.Fatal(err)
	}
	if p.generations != 1 {
		t.Errorf("%d generations started; want the one", p.generations)
	}
	if r := p.Review(ctx, 2, "hi"); r.Reason != "held by the release" {
		t.Errorf("once started: %+v", r)
	}
	trees, _ := filepath.Glob(filepath.Join(os.TempDir(), "kiln-release-*", "holding.py"))
	var tree string
	for _, f := range trees {
		if info, err := os.Stat(filepath.Dir(f)); err == nil && info.Mode().Perm() == 0o555 {
			tree = filepath.Dir(f)
		}
	}
	if tree == "" {
		t.Errorf("no read-only private copy among %q", trees)
	}
	p.Close()
	if w.State() != worker.Dead {
		t.Error("the generation outlived Close")
	}
	if _, err := os.Stat(tree); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the private copy outlived its generation: %v", err)
	}
}
