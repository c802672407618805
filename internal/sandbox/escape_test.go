package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/sandbox/escapetest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

// testHost is the Host every test of the package uses: probed once.
var testHost = sync.OnceValue(func() *Host { return Probe(context.Background(), nil) })

// python is the real interpreter, not a launcher script in front of it.
var python = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("python3", "-I", "-c", "import sys; print(sys.executable)").Output()
	return strings.TrimSpace(string(out)), err
})

func needHost(t *testing.T) (*Host, string) {
	t.Helper()
	py, err := python()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	h := testHost()
	if m := h.Mechanisms(); !m.Namespaces || m.Landlock < landlockScopedABI || !m.Seccomp {
		t.Skipf("the kernel lacks what the workspace profile needs: %+v", m)
	}
	return h, py
}

// run starts code under pol through h and returns its stdout.
func run(t *testing.T, h *Host, pol Policy, code string) (string, Applied) {
	t.Helper()
	p, applied, err := h.Start(t.Context(), pol, proc.Command{Path: pol.Python, Args: []string{"-I", "-c", escapetest.Preamble + code}, Dir: pol.Work})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	<-p.Exited()
	<-p.Drained()
	if code := p.State().ExitCode(); code != 0 {
		t.Logf("exit: %s; stderr: %s", p.Describe(), p.StderrTail())
	}
	return p.StdoutTail().String(), applied
}

// TestEscapes runs every escape under workspace, strict and none: each is refused
// under the first two (the network only under strict) and works under none.
func TestEscapes(t *testing.T) {
	h, py := needHost(t)
	w := escapetest.NewWorld(t)
	noneRan := false // the none case of the daemon's socket, which must connect
	for _, profile := range []string{ProfileWorkspace, ProfileStrict, ProfileNone} {
		pol := Policy{Profile: Profile{Name: profile}, Work: w.Work, Hide: []string{w.Data}, Python: py}
		for _, a := range w.Attempts(os.Getpid()) {
			t.Run(profile+"/"+a.Name, func(t *testing.T) {
				noneRan = noneRan || profile == ProfileNone && a.Name == "daemon socket"
				out, _ := run(t, h, pol, a.Code)
				a.Check(t, profile, out)
			})
		}
	}
	select {
	case <-w.Accepted:
	default:
		if noneRan {
			t.Errorf("the daemon's socket saw no connection, not even under none")
		}
	}
}

// TestWorkspaceWorks checks what a confined child may do: write its working directory
// and its private /tmp, read the system, run a program, reach the network as
// configured.
func TestWorkspaceWorks(t *testing.T) {
	h, py := needHost(t)
	w := escapetest.NewWorld(t)
	pol := Policy{Profile: Profile{Name: ProfileWorkspace}, Work: w.Work, Hide: []string{w.Data}, Python: py}
	out, applied := run(t, h, pol, fmt.Sprintf(`import subprocess, tempfile
open("here", "w").write("x")
os.makedirs("a/b"); os.replace("here", "a/b/there")
with tempfile.NamedTemporaryFile(dir="/tmp") as f: f.write(b"y")
open("/etc/hostname").read()
subprocess.run(["true"], check=True)
socket.create_connection(("127.0.0.1", %d), timeout=5).close()
print("fine", os.getpid(), flush=True)`, w.TCP))
	if !strings.HasPrefix(out, "fine 1") {
		t.Errorf("got %q; want fine 1", out)
	}
	if _, err := os.Stat(filepath.Join(w.Work, "a/b/there")); err != nil {
		t.Errorf("the workspace's file: %v", err)
	}
	want := Applied{Profile: ProfileWorkspace, Namespaces: []string{"user", "pid", "mount", "ipc"}, Landlock: min(h.mech.Landlock, maxLandlockABI),
		Scoped: true, Seccomp: true, Network: NetworkHost}
	if h.cgroups != nil {
		want.Cgroup, want.Processes = h.cgroups.version, DefaultMaxProcesses
	}
	applied.group = nil // the live cgroup, not a part of what applied
	if fmt.Sprint(applied) != fmt.Sprint(want) {
		t.Errorf("applied %+v; want %+v", applied, want)
	}
}

// TestAllowedPorts checks a list of ports: the listed one connects, another does not.
func TestAllowedPorts(t *testing.T) {
	h, py := needHost(t)
	w := escapetest.NewWorld(t)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pol := Policy{Profile: Profile{Name: ProfileWorkspace}, Network: Network{Mode: NetworkPorts, Ports: []uint16{uint16(w.TCP)}},
		Work: w.Work, Python: py}
	out, applied := run(t, h, pol, fmt.Sprintf(`try_(lambda: socket.create_connection(("127.0.0.1", %d), timeout=5))
try_(lambda: socket.create_connection(("127.0.0.1", %d), timeout=5))`, w.TCP, other.Addr().(*net.TCPAddr).Port))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "escaped" || !strings.HasPrefix(lines[1], "refused") {
		t.Errorf("got %q; want the allowed port to connect and the other refused", out)
	}
	if applied.Network != fmt.Sprint(w.TCP) {
		t.Errorf("network %q; want %d", applied.Network, w.TCP)
	}
}

// TestLimits checks the process and memory limits, at a bomb past them, and that
// none has neither.
func TestLimits(t *testing.T) {
	h, py := needHost(t)
	if h.cgroups == nil {
		t.Skip("kiln cannot make cgroups here")
	}
	w := escapetest.NewWorld(t)
	const processes, memory = 32, 64 << 20
	bomb := fmt.Sprintf(`import signal
kids = []
def fork():
    for _ in range(%d):
        pid = os.fork()
        if pid == 0:
            signal.pause()
        kids.append(pid)
try_(fork)
for k in kids:
    os.kill(k, 9)
    os.waitpid(k, 0)
def allocate():
    global b
    b = b"x" * %d
try_(allocate)
`, processes+8, 3*memory)
	for _, profile := range []string{ProfileWorkspace, ProfileNone} {
		t.Run(profile, func(t *testing.T) {
			pol := Policy{Profile: Profile{Name: profile}, Work: w.Work, Python: py, MaxProcesses: processes, MemoryBytes: memory}
			out, _ := run(t, h, pol, bomb)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if profile == ProfileNone {
				if out != "escaped\nescaped\n" {
					t.Errorf("got %q; want both bombs to go off", out)
				}
				return
			}
			// The memory bomb ends the child: the OOM killer's SIGKILL, or MemoryError.
			if len(lines) < 1 || !strings.HasPrefix(lines[0], "refused: BlockingIOError") || len(lines) == 2 && lines[1] == "escaped" {
				t.Errorf("got %q; want the fork bomb refused and the memory bomb stopped", out)
			}
		})
	}
}

// TestProfileUnavailable checks that a profile the host cannot give fails the start
// naming what is missing, and that best effort starts and records it.
func TestProfileUnavailable(t *testing.T) {
	_, py := needHost(t)
	h := &Host{mech: Mechanisms{Landlock: 3, Seccomp: true, Namespaces: true, ProcMount: true}, log: testHost().log}
	pol := Policy{Profile: Profile{Name: ProfileWorkspace}, Work: t.TempDir(), Python: py}
	_, _, err := h.Start(t.Context(), pol, proc.Command{Path: py, Args: []string{"-c", "pass"}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "Landlock ABI 6") {
		t.Fatalf("start: %v; want ErrUnavailable naming Landlock ABI 6", err)
	}
	pol.Profile.BestEffort = true
	p, applied, err := h.Start(t.Context(), pol, proc.Command{Path: py, Args: []string{"-c", "pass"}})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	p.Release(0)
	if applied.Landlock != 3 || applied.Scoped || len(applied.Missing) != 2 {
		t.Errorf("applied %+v; want Landlock 3, unscoped, missing scoping and cgroups", applied)
	}
	if p.State().ExitCode() != 0 {
		t.Errorf("exit %s", p.Describe())
	}
}

// TestExecFailureIsReported checks that a program the helper cannot execute fails
// the start as proc.ErrNotStarted.
func TestExecFailureIsReported(t *testing.T) {
	h, py := needHost(t)
	pol := Policy{Profile: Profile{Name: ProfileStrict}, Work: t.TempDir(), Python: py}
	_, _, err := h.Start(t.Context(), pol, proc.Command{Path: "/usr/bin/env", Args: []string{"true"}})
	if !errors.Is(err, proc.ErrNotStarted) || !strings.Contains(err.Error(), syscall.EACCES.Error()) {
		t.Fatalf("start: %v; want ErrNotStarted for permission denied", err)
	}
}
