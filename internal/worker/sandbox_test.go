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
print("parent", os.getppid())`)
	var out string
	for _, o := range rec.Output {
		if o.Stream == wire.StreamStdout {
			out += o.Text
		}
	}
	if !strings.Contains(out, "refused ") || !strings.Contains(out, "parent 1\n") {
		t.Errorf("stdout %q; want the home refused and parent 1, its namespace's init", out)
	}
	if _, err := os.Stat(filepath.Join(work, "made")); err != nil {
		t.Errorf("the cell's file: %v", err)
	}
	if a := w.Sandbox(); a.Profile != sandbox.ProfileWorkspace || !a.Seccomp || a.Landlock == 0 {
		t.Errorf("Sandbox() = %+v; want workspace with Landlock and seccomp", a)
	}
}

// needCgroupHost is the package's probed host, or a skip where it cannot confine with
// namespaces, Landlock and a cgroup.
func needCgroupHost(t *testing.T) *sandbox.Host {
	t.Helper()
	host := sandboxHost()
	if m := host.Mechanisms(); !m.Namespaces || m.Landlock == 0 || m.Cgroup == "" {
		t.Skipf("no namespaces, Landlock or cgroup here: %+v", m)
	}
	return host
}

// oomChildren is a cell that starts two children which each fill, page by page, more
// than half of a 256 MiB cgroup, within their own address space: the kernel's OOM
// killer ends one of them, and the cell prints how each ended.
const oomChildren = `import subprocess, sys, time
fill = "b = b'x' * (140 << 20); print('full', flush=True); import sys; sys.stdin.read()"
ps = [subprocess.Popen([sys.executable, "-c", fill], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL) for _ in range(2)]
deadline = time.monotonic() + 60
while time.monotonic() < deadline and all(p.poll() is None for p in ps):
    time.sleep(0.05)
first = [p.poll() for p in ps if p.poll() is not None]
for p in ps:
    p.kill()
    p.wait()
print("first", first)`

// TestAnOOMKillIsTheMemoryLimit: where the cgroup's memory runs out before any address
// space does, the kernel kills a process rather than raising MemoryError. The cell is
// then recorded as having hit the memory limit: when the process killed is a child of
// the cell, and the cell goes on, and when it is the worker, and the namespace is lost.
func TestAnOOMKillIsTheMemoryLimit(t *testing.T) {
	host := needCgroupHost(t)
	policy := sandbox.Policy{Profile: sandbox.Profile{Name: sandbox.ProfileWorkspace}}
	t.Run("child", func(t *testing.T) {
		w := startWorker(t, Config{Dir: t.TempDir(), SandboxHost: host, Sandbox: policy, MemoryBytes: 256 << 20})
		if rec := execute(t, w, "c-1", "x = 1"); rec.Status != wire.StatusOK || rec.Limit != "" {
			t.Fatalf("c-1: got %s, limit %q, %q", rec.Status, rec.Limit, errText(rec))
		}
		rec := execute(t, w, "c-2", oomChildren)
		if rec.Status != wire.StatusOK || rec.Limit != LimitMemory || rec.NamespaceLost {
			t.Fatalf("c-2: got %s, limit %q, lost %v, %q, %v; want ok, limit memory, namespace kept",
				rec.Status, rec.Limit, rec.NamespaceLost, errText(rec), rec.Output)
		}
		if out := stdout(rec); !strings.Contains(out, "first [-9]") {
			t.Errorf("c-2 printed %q; want a child killed first, by SIGKILL", out)
		}
		if rec := execute(t, w, "c-3", "x"); rec.Status != wire.StatusOK || rec.Limit != "" {
			t.Errorf("c-3: got %s, limit %q, %q; want ok in the same namespace, no limit", rec.Status, rec.Limit, errText(rec))
		}
	})
	t.Run("worker", func(t *testing.T) {
		w := startWorker(t, Config{Dir: t.TempDir(), SandboxHost: host, Sandbox: policy, MemoryBytes: 256 << 20})
		if rec := execute(t, w, "c-1", "held = b'x' * (150 << 20)"); rec.Status != wire.StatusOK {
			t.Fatalf("c-1: got %s, %q", rec.Status, errText(rec))
		}
		rec := execute(t, w, "c-2", `import subprocess, sys
subprocess.run([sys.executable, "-c", "b = b'x' * (150 << 20)"])`)
		if rec.Limit != LimitMemory || !rec.NamespaceLost {
			t.Fatalf("c-2: got %s, limit %q, lost %v, %q; want the worker killed, limit memory",
				rec.Status, rec.Limit, rec.NamespaceLost, errText(rec))
		}
	})
}

// stdout is what the cell of rec wrote to stdout.
func stdout(rec Record) string {
	var out string
	for _, o := range rec.Output {
		if o.Stream == wire.StreamStdout {
			out += o.Text
		}
	}
	return out
}
