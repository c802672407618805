package kiln_test

import (
	stdjson "encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/journal"
)

// policySource writes a policy source tree whose hooks are module name's, holding every
// send with reason, and returns its directory.
func policySource(t *testing.T, name, reason string) string {
	t.Helper()
	src := t.TempDir()
	manifest := `{"version":1,"hooks":{"attention.plan":"` + name + `:attention","delivery.review":"` + name + `:delivery"}}`
	hooks := "from kiln_hooks import Hold, Wake\n\ndef attention(request, context):\n    return Wake(100)\n\n" +
		"def delivery(request, context):\n    return Hold(" + `"` + reason + `")` + "\n"
	if err := os.WriteFile(filepath.Join(src, "manifest.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, name+".py"), []byte(hooks), 0o600); err != nil {
		t.Fatal(err)
	}
	return src
}

// No data directory given is the default one, for releases as for the Journal.
func TestReleasesInTheDefaultDataDir(t *testing.T) {
	ctx, xdg := t.Context(), releaseData(t)
	t.Setenv("XDG_DATA_HOME", xdg)
	data := filepath.Join(xdg, "kiln")
	r, err := admin.BuildRelease("", policySource(t, "default_dir", "held"))
	if err != nil {
		t.Fatal(err)
	}
	if stored, err := admin.StoredReleases(data); err != nil || len(stored) != 1 || stored[0].ID != r.ID {
		t.Fatalf("releases stored in %s: %+v, %v", data, stored, err)
	}
	if _, err := admin.ActivateRelease(ctx, "", r.ID, 0, admin.PolicyOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", data} {
		if b, err := admin.ReadBehavior(ctx, dir); err != nil || b.Epoch != 1 || b.ReleaseID != r.ID {
			t.Errorf("ReadBehavior(%q): %+v, %v; want epoch 1", dir, b, err)
		}
		if h, err := admin.ActiveHooks(ctx, dir); err != nil || h.Behavior.Epoch != 1 {
			t.Errorf("ActiveHooks(%q): %+v, %v; want epoch 1", dir, h, err)
		}
		if stored, err := admin.StoredReleases(dir); err != nil || len(stored) != 1 {
			t.Errorf("StoredReleases(%q): %+v, %v", dir, stored, err)
		}
	}
}

// A release is built, listed, activated by a compare-and-swap of the epoch, and named
// by the hooks it makes active; one whose hooks do not import never becomes active.
func TestReleaseLifecycle(t *testing.T) {
	t.Parallel()
	ctx, data := t.Context(), releaseData(t)
	b, err := admin.ReadBehavior(ctx, data)
	if err != nil || b.Epoch != 0 || !b.Initial() || !b.ActivatedAt.IsZero() {
		t.Fatalf("a directory without a record: %+v, %v", b, err)
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) != 0 {
		t.Fatalf("reading the behavior made %v, %v", entries, err)
	}
	if _, err := admin.ActiveHooks(ctx, data); !errors.Is(err, journal.ErrNoRecord) {
		t.Fatalf("hooks without a record: %v", err)
	}
	if stored, err := admin.StoredReleases(data); err != nil || len(stored) != 0 {
		t.Fatalf("stored releases of a new directory: %+v, %v", stored, err)
	}

	src := policySource(t, "mine", "mine holds everything")
	r, err := admin.BuildRelease(data, src)
	if err != nil || len(r.ID) != 64 || r.Files != 2 || r.Dir != filepath.Join(data, "releases", r.ID) {
		t.Fatalf("built %+v, %v", r, err)
	}
	if again, err := admin.BuildRelease(data, src); err != nil || again != r {
		t.Fatalf("built again %+v, %v; want %+v", again, err, r)
	}
	if err := os.WriteFile(filepath.Join(src, "run.sh"), []byte("echo hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.BuildRelease(data, src); err == nil || !strings.Contains(err.Error(), "run.sh: extension not allowed") {
		t.Fatalf("a tree with a shell script: %v", err)
	}

	if _, err := admin.ActivateRelease(ctx, data, r.ID, 1, admin.PolicyOptions{}); !errors.Is(err, admin.ErrStaleEpoch) {
		t.Fatalf("activating at a stale epoch: %v", err)
	}
	b, err = admin.ActivateRelease(ctx, data, r.ID, 0, admin.PolicyOptions{})
	if err != nil || b.Epoch != 1 || b.ReleaseID != r.ID || b.Initial() || b.ActivatedAt.IsZero() {
		t.Fatalf("activated %+v, %v", b, err)
	}
	if read, err := admin.ReadBehavior(ctx, data); err != nil || read.Epoch != 1 || read.ReleaseID != r.ID {
		t.Fatalf("read back %+v, %v", read, err)
	}
	h, err := admin.ActiveHooks(ctx, data)
	if err != nil || h.Behavior.Epoch != 1 || h.Handler("delivery.review") != "mine:delivery" || h.Handler("reply.draft") != "" {
		t.Fatalf("hooks %+v, %v", h, err)
	}
	var slots []string
	for _, s := range h.Slots {
		slots = append(slots, s.Slot)
	}
	if want := admin.HookSlots()[:2]; !slices.Equal(slots, want) { // the release names no optional slot
		t.Errorf("slots %v; want %v", slots, want)
	}

	brokenSrc := t.TempDir()
	if err := os.WriteFile(filepath.Join(brokenSrc, "manifest.json"),
		[]byte(`{"version":1,"hooks":{"attention.plan":"nosuchmodule:a","delivery.review":"nosuchmodule:d"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	broken, err := admin.BuildRelease(data, brokenSrc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ActivateRelease(ctx, data, broken.ID, 1, admin.PolicyOptions{}); err == nil || !strings.Contains(err.Error(), "nosuchmodule") {
		t.Fatalf("activating hooks that do not import: %v", err)
	}
	if read, err := admin.ReadBehavior(ctx, data); err != nil || read.Epoch != 1 {
		t.Fatalf("after a refused activation: %+v, %v", read, err)
	}
	stored, err := admin.StoredReleases(data)
	if err != nil || len(stored) != 2 || !slices.IsSortedFunc(stored, func(a, b admin.StoredRelease) int { return strings.Compare(a.ID, b.ID) }) {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	for _, s := range stored {
		if s.Refused != "" || s.Dir != filepath.Join(data, "releases", s.ID) {
			t.Errorf("stored %+v", s)
		}
	}
}

// A stored release altered on disk is listed as refused, saying why, and never
// activates.
func TestStoredReleaseTampered(t *testing.T) {
	ctx, data := t.Context(), releaseData(t)
	r, err := admin.BuildRelease(data, policySource(t, "mine", "held"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(r.Dir, "mine.py")
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("raise SystemExit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stored, err := admin.StoredReleases(data)
	if err != nil || len(stored) != 1 || stored[0].ID != r.ID || stored[0].Files != 0 || !strings.Contains(stored[0].Refused, "corrupt") {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	if _, err := admin.ActivateRelease(ctx, data, r.ID, 0, admin.PolicyOptions{}); err == nil {
		t.Fatal("a tampered release activated")
	}
	data2 := stdjson.RawMessage(mustJSON(t, stored[0]))
	var back admin.StoredRelease
	if err := stdjson.Unmarshal(data2, &back); err != nil || back != stored[0] || !strings.HasPrefix(string(data2), `{"id":"`+r.ID+`","files":0,"dir":`) {
		t.Errorf("%s read back as %+v, %v", data2, back, err)
	}
}

// Each slot is described; a slot there is not is not.
func TestDescribeSlot(t *testing.T) {
	slots := admin.HookSlots()
	if strings.Join(slots, ",") != "attention.plan,delivery.review,execution.review" {
		t.Fatalf("slots %v", slots)
	}
	slots[0] = "changed"
	if admin.HookSlots()[0] == "changed" {
		t.Fatal("HookSlots shares its slice")
	}
	for _, slot := range admin.HookSlots() {
		d, ok := admin.DescribeSlot(slot)
		if !ok || d.Slot != slot || len(d.Input) == 0 || len(d.Decisions) == 0 || len(d.Rules) == 0 {
			t.Errorf("%s: %+v, %v", slot, d, ok)
		}
	}
	if d, _ := admin.DescribeSlot("attention.plan"); !slices.Contains(d.Rules, "operator input always wakes, at top priority, whatever the hook says") {
		t.Errorf("attention.plan's rules: %q", d.Rules)
	}
	d, _ := admin.DescribeSlot("attention.plan")
	d.Rules[0], d.Decisions[0] = "changed", "changed"
	for k := range d.Input {
		d.Input[k] = "changed"
	}
	if again, _ := admin.DescribeSlot("attention.plan"); again.Rules[0] == "changed" || again.Decisions[0] == "changed" ||
		slices.Contains(slices.Collect(maps.Values(again.Input)), "changed") {
		t.Errorf("DescribeSlot shares the descriptions cells are served: %+v", again)
	}
	if _, ok := admin.DescribeSlot("reply.draft"); ok {
		t.Error("a slot there is not is described")
	}
}

// mustJSON is v's deterministic JSON.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
