package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/wire"
)

// sandboxHost is the mechanisms the package's confined workers use, probed once.
var sandboxHost = sync.OnceValue(func() *sandbox.Host { return sandbox.Probe(context.Background(), nil) })

// TestAConfinedWorkerStaysInItsWorkspace runs cells in a worker under the workspace
// profile: they write their working directory, and cannot read the home directory or
// see the host's processes; the worker records what confined it.
func TestAConfinedWorkerStaysInItsWorkspace(t *testing.T) {
	in, err := interp.Find(context.Background(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	host := sandboxHost()
	if m := host.Mechanisms(); !m.Namespaces || m.Landlock == 0 {
		t.Skipf("no namespaces or Landlock here: %+v", m)
	}
	home, work := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	os.WriteFile(filepath.Join(home, "secret"), []byte("s"), 0o600)
	w := startWorker(t, Config{Python: in.Path, Dir: work, SandboxHost: host,
		Sandbox: sandbox.Policy{Profile: sandbox.Profile{Name: sandbox.ProfileWorkspace}}})
	rec := execute(t, w, "c-1", `import os
open("made", "w").write("x")
try:
    open(os.path.join(os.environ["HOME"], "secret")).read()
    print("read home")
except OSError as e:
    print("refused", e.errno)
print("pid", os.getpid())`)
	var out string
	for _, o := range rec.Output {
		if o.Stream == wire.StreamStdout {
			out += o.Text
		}
	}
	if !strings.Contains(out, "refused ") || !strings.Contains(out, "pid 1\n") {
		t.Errorf("stdout %q; want the home refused and pid 1", out)
	}
	if _, err := os.Stat(filepath.Join(work, "made")); err != nil {
		t.Errorf("the cell's file: %v", err)
	}
	if a := w.Sandbox(); a.Profile != sandbox.ProfileWorkspace || !a.Seccomp || a.Landlock == 0 {
		t.Errorf("Sandbox() = %+v; want workspace with Landlock and seccomp", a)
	}
}
