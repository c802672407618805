package proc

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/poll"
)

func TestTail(t *testing.T) {
	tests := []struct {
		writes  []string
		max     int
		want    string
		dropped int64
	}{
		{[]string{"abc"}, 4, "abc", 0},
		{[]string{"abcd"}, 4, "abcd", 0},                  // at the bound
		{[]string{"abcde"}, 4, "bcde", 1},                 // one past it
		{[]string{"ab", "cd", "ef"}, 4, "cdef", 2},        // across writes
		{[]string{"a", "bcdefgh"}, 4, "efgh", 4},          // a write larger than the bound
		{[]string{"abcd", "", "e"}, 4, "bcde", 1},         // empty writes change nothing
		{[]string{"xy", "abcdefghij", "z"}, 4, "hijz", 9}, // dropped counts both
		{[]string{"a\xc3\xffb"}, 4, "a\ufffdb", 0},        // bytes that are not UTF-8: one U+FFFD a run
		{[]string{"xé"}, 1, "\ufffd", 2},                  // the kept end begins inside a character
	}
	for _, tt := range tests {
		tail := NewTail(tt.max)
		for _, w := range tt.writes {
			if n, err := tail.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		got := tail.String()
		if tt.dropped > 0 {
			want := "[" + strconv.FormatInt(tt.dropped, 10) + " earlier bytes not kept]\n" + tt.want
			if got != want {
				t.Errorf("%q: got %q; want %q", tt.writes, got, want)
			}
		} else if got != tt.want {
			t.Errorf("%q: got %q; want %q", tt.writes, got, tt.want)
		}
		if tail.Dropped() != tt.dropped {
			t.Errorf("%q: dropped %d; want %d", tt.writes, tail.Dropped(), tt.dropped)
		}
	}
}

func start(t *testing.T, script string) *Process {
	t.Helper()
	p, err := Start(Command{Path: "python3", Args: []string{"-I", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); <-p.Exited() })
	return p
}

func TestOutputIsDrainedIntoTails(t *testing.T) {
	p := start(t, `import os, sys
sys.stdout.write("x" * 100000 + "END")
os.write(2, b"oops\n")`)
	<-p.Exited()
	<-p.Drained()
	out := p.StdoutTail().String()
	if !strings.HasSuffix(out, "END") || p.StdoutTail().Dropped() != 100003-TailSize {
		t.Errorf("stdout tail ends %q, dropped %d", out[len(out)-10:], p.StdoutTail().Dropped())
	}
	if got := p.StderrTail().String(); got != "oops\n" {
		t.Errorf("stderr tail %q", got)
	}
}

func TestStdinIsDeliveredThenClosed(t *testing.T) {
	p, err := Start(Command{Path: "python3", Args: []string{"-I", "-c",
		`import sys; print(repr(sys.stdin.readline())); print(repr(sys.stdin.read()))`}, Stdin: []byte("token\n")})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	<-p.Drained()
	if got := p.StdoutTail().String(); got != "'token\\n'\n''\n" {
		t.Errorf("got %q", got)
	}
}

func TestChildLeadsItsOwnGroup(t *testing.T) {
	p := start(t, `import os, time; print(os.getpgid(0), flush=True); time.sleep(30)`)
	poll.Until(t, 10*time.Second, func() bool { return strings.Contains(p.StdoutTail().String(), "\n") })
	pgid, _ := strconv.Atoi(strings.TrimSpace(p.StdoutTail().String()))
	if pgid != p.Pid() {
		t.Errorf("pgid %d; want %d", pgid, p.Pid())
	}
}

// TestReleaseClosesThePipes checks that Release closes the output pipes of a child
// whose output reached EOF before it was called, as well as of one whose did not.
func TestReleaseClosesThePipes(t *testing.T) {
	p := start(t, `print("done")`)
	<-p.Exited()
	<-p.Drained()
	p.Release(time.Second)
	for i, f := range p.pipes {
		if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
			t.Errorf("pipe %d after Release: %v; want it closed", i, err)
		}
	}
}

// TestWhileUnreapedNamesOnlyTheChild checks that fn gets the child's pid while the
// child is alive, and is not called once it has been reaped.
func TestWhileUnreapedNamesOnlyTheChild(t *testing.T) {
	p := start(t, `import time; time.sleep(30)`)
	var got int
	if err := p.WhileUnreaped(func(pid int) error { got = pid; return nil }); err != nil || got != p.Pid() {
		t.Errorf("alive: pid %d, %v; want %d, nil", got, err, p.Pid())
	}
	p.Kill()
	<-p.Exited()
	called := false
	if err := p.WhileUnreaped(func(int) error { called = true; return nil }); !errors.Is(err, ErrReaped) || called {
		t.Errorf("reaped: %v, fn called %v; want ErrReaped, not called", err, called)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	p := start(t, `import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)`)
	poll.Until(t, 10*time.Second, func() bool { return strings.Contains(p.StdoutTail().String(), "ready") })
	if err := p.Stop(context.Background(), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if s := p.State(); s == nil || s.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("state %v; want killed", s)
	}
}

func TestStopKillsTheWholeGroup(t *testing.T) {
	p := start(t, `import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)`)
	poll.Until(t, 10*time.Second, func() bool { return strings.Contains(p.StdoutTail().String(), "\n") })
	grandchild, _ := strconv.Atoi(strings.TrimSpace(p.StdoutTail().String()))
	if err := p.Stop(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool { return !alive(grandchild) })
}

func TestReleaseAbandonsPipesHeldByAnEscapee(t *testing.T) {
	p := start(t, `import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(60)"])
print(child.pid, flush=True)`)
	poll.Until(t, 10*time.Second, func() bool { return strings.Contains(p.StdoutTail().String(), "\n") })
	escapee, _ := strconv.Atoi(strings.TrimSpace(p.StdoutTail().String()))
	defer syscall.Kill(escapee, syscall.SIGKILL)
	<-p.Exited()
	p.Release(100 * time.Millisecond) // the escapee holds the pipes for 60s more
	select {
	case <-p.Drained():
	default:
		t.Fatal("not drained after Release")
	}
}

func TestStartFailureIsReported(t *testing.T) {
	_, err := Start(Command{Path: "/nonexistent/python3"})
	if !errors.Is(err, ErrNotStarted) {
		t.Errorf("got %v; want ErrNotStarted", err)
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil {
		return false
	}
	// A zombie still answers kill(0); it is dead all the same.
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return !bytes.Contains(stat, []byte(") Z "))
}

// slowSink is a sink that takes its time over each write.
type slowSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *slowSink) Write(b []byte) (int, error) {
	time.Sleep(20 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(b)
}

func (s *slowSink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Len()
}

// TestFlushDeliversWhatWasWritten writes more than a pipe holds to a slow sink, then
// says so on stderr and keeps running: Flush returns only once all of it reached the
// sink, without the process ending.
func TestFlushDeliversWhatWasWritten(t *testing.T) {
	out := &slowSink{}
	errs := NewTail(TailSize)
	p, err := Start(Command{Path: "python3", Args: []string{"-I", "-c", `import os, time
data = b"x" * 300000
while data:
    data = data[os.write(1, data):]
os.write(2, b"written\n")
time.sleep(60)`}, Stdout: out, Stderr: errs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); <-p.Exited() })
	poll.Until(t, 10*time.Second, func() bool { return strings.Contains(errs.String(), "written") })
	t.Logf("before Flush the sink has %d bytes", out.Len())
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := out.Len(); got != 300000 {
		t.Errorf("after Flush the sink has %d bytes; want 300000", got)
	}
	select {
	case <-p.Exited():
		t.Error("the process ended")
	default:
	}
	// A context that ends first stops the wait.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Flush(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Flush with a cancelled context: %v", err)
	}
	// Once the pipes are released, Flush has nothing to wait for.
	p.Kill()
	<-p.Exited()
	p.Release(0)
	if err := p.Flush(t.Context()); err != nil {
		t.Errorf("Flush after Release: %v", err)
	}
}
