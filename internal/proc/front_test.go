package proc

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/poll"
)

// startFronted starts python as init of its namespace running code behind kiln's init
// (python/kiln/nsinit.py), the init's status pipe at fd 3.
func startFronted(t *testing.T, code string) (*Process, *Tail) {
	t.Helper()
	front, err := NewFront()
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	out := NewTail(TailSize)
	c := frontedCommand(t, front, code)
	c.Stdout = out
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); <-p.Exited() })
	if !p.Namespaced() {
		t.Skip("the kernel refuses user and PID namespaces here")
	}
	return p, out
}

// frontedCommand runs code in python, init of its namespace, behind kiln's init
// (python/kiln/nsinit.py), front's pipe at fd 3.
func frontedCommand(t *testing.T, front *Front, code string) Command {
	t.Helper()
	pkg, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	script := "import sys\nsys.path.insert(0, " + pyQuote(pkg) + ")\nfrom kiln import nsinit\nnsinit.front(3)\n" + code
	return Command{Path: "python3", Args: []string{"-I", "-c", script}, Contain: true,
		ExtraFiles: []*os.File{front.File()}, Front: front}
}

// pyQuote is s as a Python string literal, for paths without quotes or backslashes.
func pyQuote(s string) string { return `"` + s + `"` }

// TestAnInitReportsItsProgramsEnd runs programs behind the init: each ends as a plain
// process would, and the host sees that end, not the init's. A program that signals
// itself (as init it would ignore it), one that exits with a code, and one the host's
// SIGTERM reaches through the init, after it left orphans behind for the init to reap
// and spun, so that its CPU time is read while it runs and once it ended.
func TestAnInitReportsItsProgramsEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, code, want string
		host             func(t *testing.T, p *Process, out *Tail)
	}{
		{"own signal", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "signal: segmentation fault", nil},
		{"exit code", "import os\nos._exit(7)", "exit status 7", nil},
		{"host's SIGTERM", `import os, time
for _ in range(50):
    if os.fork() == 0:
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.wait()
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print(os.getpid(), os.getppid(), flush=True)
time.sleep(60)`, "signal: terminated", func(t *testing.T, p *Process, out *Tail) {
			poll.Until(t, 30*time.Second, func() bool { return strings.Contains(out.String(), "\n") })
			if pid, ppid, _ := strings.Cut(strings.TrimSpace(out.String()), " "); pid == "1" || ppid != "1" {
				t.Errorf("the program's pid %s and parent %s; want the init's child", pid, ppid)
			}
			if pid := p.Program(); pid == 0 || pid == p.Pid() {
				t.Errorf("Program() = %d; want the init's child, not the init %d", pid, p.Pid())
			}
			if cpu, ok := p.CPU(); !ok || cpu < 300*time.Millisecond {
				t.Errorf("CPU while it runs %v, %v; want the program's spin", cpu, ok)
			}
			zombies := 0
			for _, pid := range children(p.Pid()) {
				if _, state, ok := readStat(pid); ok && state == 'Z' {
					zombies++
				}
			}
			if zombies != 0 {
				t.Errorf("%d zombies under the init", zombies)
			}
			p.Signal(syscall.SIGTERM)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, out := startFronted(t, tt.code)
			if tt.host != nil {
				tt.host(t, p, out)
			}
			<-p.Exited()
			if got := p.Describe(); got != tt.want {
				t.Errorf("ended %q; want %q (the init itself: %s)", got, tt.want, p.State())
			}
			if tt.host != nil {
				if cpu, _ := p.CPU(); cpu < 300*time.Millisecond {
					t.Errorf("CPU once ended %v; want the program's spin", cpu)
				}
			}
		})
	}
}

// TestAFrontServesAStartMadeAgain: a command started again with the same Front (a start
// the kernel refused in part, a fork that falls back to a spawn) reports its own
// program's end, not the end a discarded earlier attempt's init wrote, and the earlier
// attempt's reaping leaves the pipe to the later one.
func TestAFrontServesAStartMadeAgain(t *testing.T) {
	t.Parallel()
	front, err := NewFront()
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	start := func(code string) *Process {
		p, err := Start(frontedCommand(t, front, code))
		if err != nil {
			t.Fatal(err)
		}
		<-p.Exited()
		if !p.Namespaced() {
			t.Skip("the kernel refuses user and PID namespaces here")
		}
		return p
	}
	if got := start("import os\nos._exit(3)").Describe(); got != "exit status 3" {
		t.Fatalf("the first attempt: %s; want exit status 3", got)
	}
	// The first attempt's status was read; one written by an init the host discarded
	// unread stays in the pipe until the next start empties it.
	if _, err := front.File().Write([]byte("1\n")); err != nil {
		t.Fatal(err)
	}
	if got := start("import os\nos._exit(7)").Describe(); got != "exit status 7" {
		t.Errorf("the attempt made again: %s; want exit status 7", got)
	}
}
