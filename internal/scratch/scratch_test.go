package scratch

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A sweep removes the directories of hosts that have died, of every kind, read-only ones
// included, and only those.
func TestSweepStale(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mine, err := Make(Program)
	if err != nil {
		t.Fatal(err)
	}
	if owner, ok := Owner(filepath.Base(mine)); !ok || owner != os.Getpid() {
		t.Errorf("%s names owner %d, %v; want this process", mine, owner, ok)
	}
	names := map[string]bool{ // name: kept
		fmt.Sprintf("kiln-worker-p%d-1", dead.Process.Pid):  false,
		fmt.Sprintf("kiln-release-p%d-2", dead.Process.Pid): false,
		fmt.Sprintf("kiln-program-p%d-3", dead.Process.Pid): false,
		fmt.Sprintf("kiln-worker-p%d-4", os.Getpid()):       true,
		"kiln-worker-5": true, // no owner named
		fmt.Sprintf("kiln-worker-p0%d-6", dead.Process.Pid): true, // not a pid as written
		fmt.Sprintf("kiln-other-p%d-7", dead.Process.Pid):   true, // not a kind kiln makes
		filepath.Base(mine): true,
	}
	for name := range names {
		if err := os.MkdirAll(filepath.Join(tmp, name, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A release's private copy is read-only.
	release := filepath.Join(tmp, fmt.Sprintf("kiln-release-p%d-2", dead.Process.Pid))
	if err := os.WriteFile(filepath.Join(release, "sub", "hooks.py"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(release, "sub"), release} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if n := SweepStale(slog.New(slog.DiscardHandler)); n != 3 {
		t.Errorf("swept %d; want 3", n)
	}
	for name, kept := range names {
		if _, err := os.Stat(filepath.Join(tmp, name)); (err == nil) != kept {
			t.Errorf("%s: %v; want kept=%v", name, err, kept)
		}
	}
}
