package proc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
	"golang.org/x/sys/unix"
)

// Routes is cell-style Python code that starts one long sleeper by each route a process
// can take out of its parent's reach, every sleeper carrying marker as its argument, then
// prints "started". The double fork's middle process exits, so its child is an orphan.
func routes(marker string) string {
	return fmt.Sprintf(`import glob, os, subprocess, time
m = %q
subprocess.Popen(["sleep", m])
subprocess.Popen(["sleep", m], start_new_session=True)
subprocess.Popen(["setsid", "sleep", m])
subprocess.Popen(["sh", "-c", "nohup sleep " + m + " >/dev/null 2>&1 &"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", m])
    os._exit(0)
def children():
    return sum(len(open(f).read().split()) for f in glob.glob("/proc/self/task/*/children"))
while children() < 4:  # the double fork's middle process gone
    time.sleep(0.01)
print("started", flush=True)
`, marker)
}

// newMarker is a sleep duration no other process uses: the argument that finds the
// sleepers of one test.
func newMarker() string {
	return fmt.Sprintf("%d.%09d", 5000+rand.IntN(1000), rand.IntN(1_000_000_000))
}

// awaitSleepers waits until n processes carry marker, and kills them all when the test
// ends, whatever it found.
func awaitSleepers(t *testing.T, marker string, n int) {
	t.Helper()
	t.Cleanup(func() {
		for _, pid := range leakcheck.WithArg(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	poll.Until(t, 10*time.Second, func() bool { return len(leakcheck.WithArg(marker)) == n })
}

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

func startContained(t *testing.T, script string) *Process {
	t.Helper()
	p, err := Start(Command{Path: "python3", Args: []string{"-I", "-c", script}, Contain: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); <-p.Exited() })
	if !p.Namespaced() {
		t.Skip("the kernel refuses user and PID namespaces here")
	}
	return p
}

// TestContainedDescendantsEndWithKill checks that killing a contained child ends every
// process it started, by every route, before Exited is closed.
func TestContainedDescendantsEndWithKill(t *testing.T) {
	marker := newMarker()
	p := startContained(t, routes(marker)+"time.sleep(60)")
	poll.Until(t, 10*time.Second, func() bool { return bytes.Contains([]byte(p.StdoutTail().String()), []byte("started")) })
	awaitSleepers(t, marker, 5)
	p.Kill()
	<-p.Exited()
	if left := leakcheck.WithArg(marker); len(left) > 0 {
		t.Errorf("processes %v outlived their namespace's init", left)
	}
}

// TestContainedDescendantsEndWhenTheChildExits checks the same when the child ends of
// its own accord.
func TestContainedDescendantsEndWhenTheChildExits(t *testing.T) {
	marker := newMarker()
	p := startContained(t, routes(marker)+`import signal
signal.signal(signal.SIGUSR1, lambda *_: os._exit(3))
time.sleep(60)`)
	poll.Until(t, 10*time.Second, func() bool { return bytes.Contains([]byte(p.StdoutTail().String()), []byte("started")) })
	awaitSleepers(t, marker, 5)
	p.Signal(syscall.SIGUSR1)
	<-p.Exited()
	if code := p.State().ExitCode(); code != 3 {
		t.Errorf("exit status %d; want 3", code)
	}
	if left := leakcheck.WithArg(marker); len(left) > 0 {
		t.Errorf("processes %v outlived their namespace's init", left)
	}
}

// TestKillSweepsDescendantsOutsideTheGroup checks the guarantee without a namespace:
// Kill ends the descendants that left the group or the session while they are still
// descendants, and the orphans that stayed in the group (nohup's, once its shell
// exited); only the orphan of the double fork, adopted by init in a session of its own,
// is beyond it.
func TestKillSweepsDescendantsOutsideTheGroup(t *testing.T) {
	marker := newMarker()
	p := start(t, routes(marker)+"time.sleep(60)")
	poll.Until(t, 10*time.Second, func() bool { return bytes.Contains([]byte(p.StdoutTail().String()), []byte("started")) })
	awaitSleepers(t, marker, 5)
	p.Kill()
	<-p.Exited()
	// Those still in the group die of its SIGKILL, which the kernel delivers in its time.
	poll.Until(t, 10*time.Second, func() bool { return len(leakcheck.WithArg(marker)) == 1 })
}

// TestSignalGroupAfterReapingDoesNothing checks that the group is not signalled once
// its leader is reaped, when its id may already be another process's.
func TestSignalGroupAfterReapingDoesNothing(t *testing.T) {
	p := start(t, "pass")
	<-p.Exited()
	if err := p.SignalGroup(syscall.SIGKILL); err != nil {
		t.Errorf("SignalGroup after reaping: %v", err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("Signal after reaping: %v", err)
	}
}

// TestParentDeathSignalOutlivesTheStartingThread starts a child from a goroutine locked
// to its thread, which ends with it (golang/go#27505): the child must not receive its
// parent-death signal then, only when the host ends.
func TestParentDeathSignalOutlivesTheStartingThread(t *testing.T) {
	type started struct {
		p   *Process
		tid int
		err error
	}
	done := make(chan started)
	var s started
	for s.p == nil && s.err == nil {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			if unix.Gettid() == os.Getpid() {
				// The runtime keeps the main thread whatever its goroutine does: try another.
				runtime.UnlockOSThread()
				done <- started{}
				return
			}
			p, err := Start(Command{Path: "python3", Args: []string{"-I", "-c", "import time; time.sleep(60)"}})
			done <- started{p, unix.Gettid(), err}
		}()
		s = <-done
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() { s.p.Kill(); <-s.p.Exited() })
	poll.Until(t, 10*time.Second, func() bool {
		_, err := os.Stat("/proc/self/task/" + strconv.Itoa(s.tid))
		return os.IsNotExist(err)
	})
	s.p.Signal(syscall.SIGTERM)
	<-s.p.Exited()
	if sig := s.p.State().Sys().(syscall.WaitStatus).Signal(); sig != syscall.SIGTERM {
		t.Errorf("the child ended by %v; want the SIGTERM sent after its starting thread ended", sig)
	}
}

// TestKillEndsTheLeaderByItsOwnSIGKILL kills a shell waiting for its child: the sweep
// kills the child first, and the shell must not see it die and exit of itself.
func TestKillEndsTheLeaderByItsOwnSIGKILL(t *testing.T) {
	marker := newMarker()
	p := start(t, "import os; os.execvp('sh', ['sh', '-c', 'sleep "+marker+" & wait; exit 3'])")
	awaitSleepers(t, marker, 1)
	p.Kill()
	<-p.Exited()
	if sig := p.State().Sys().(syscall.WaitStatus).Signal(); sig != syscall.SIGKILL {
		t.Errorf("the leader ended %v; want killed by SIGKILL", p.State())
	}
}
