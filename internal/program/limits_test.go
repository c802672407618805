package program

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/python"
)

// TestCPUTimeout spins with a one-second CPU limit, letting SIGXCPU end it, and with
// SIGXCPU ignored, blocked or trapped, where the kernel's hard limit SIGKILLs it: all
// are timeouts.
func TestCPUTimeout(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := Limits{CPUSeconds: 1, Wall: 30 * time.Second}
	tests := []struct {
		name, src, signal string
	}{
		{"spin", "while True: pass", "SIGXCPU"},
		{"SIGXCPU ignored", "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass", "SIGKILL"},
		{"SIGXCPU blocked", "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXCPU})\nwhile True: pass", "SIGKILL"},
		{"SIGXCPU trapped", "import signal\nsignal.signal(signal.SIGXCPU, lambda *a: None)\nwhile True: pass", "SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, r, nil, lim, tt.src)
			wantStatus(t, res, StatusTimeout)
			if res.Signal != tt.signal || !strings.Contains(res.Error, "CPU time limit of 1s") {
				t.Errorf("signal %q, error %q; want %s and the CPU limit", res.Signal, res.Error, tt.signal)
			}
			if res.CPU < time.Second-cpuSlack {
				t.Errorf("CPU %v; want at least the limit", res.CPU)
			}
		})
	}
}

// TestWallTimeout sleeps past the wall clock. The limit leaves a loaded machine time to
// start python and print before it.
func TestWallTimeout(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, nil, Limits{Wall: 3 * time.Second}, "import time\nprint('going to sleep', flush=True)\ntime.sleep(60)")
	wantStatus(t, res, StatusTimeout)
	if res.Error != "wall-clock limit of 3s reached" || res.Wall < 3*time.Second || res.Wall > 20*time.Second {
		t.Errorf("error %q after %v", res.Error, res.Wall)
	}
	if strings.Join(res.Logs, "|") != "going to sleep" {
		t.Errorf("logs %q", res.Logs)
	}
}

// TestExitCode: os._exit(7) is a worker-exit with code 7; a signal, with its name.
func TestExitCode(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, nil, testLimits, "import os\nprint('bye')\nos._exit(7)")
	wantStatus(t, res, StatusWorkerExit)
	if res.ExitCode != 7 || res.Error != "python exited (code=7)" {
		t.Errorf("exit code %d, error %q; want 7", res.ExitCode, res.Error)
	}
	res = run(t, r, nil, testLimits, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
	wantStatus(t, res, StatusWorkerExit)
	if res.ExitCode != -1 || res.Signal != "SIGSEGV" || res.Error != "python exited (signal=SIGSEGV)" {
		t.Errorf("exit code %d, signal %q, error %q; want SIGSEGV", res.ExitCode, res.Signal, res.Error)
	}
}

// TestSIGTERMTrapIsKilledAfterGrace traps SIGTERM and goes on after the host ends the
// run: the host sends SIGTERM, waits the grace, and SIGKILLs the group.
func TestSIGTERMTrapIsKilledAfterGrace(t *testing.T) {
	t.Parallel()
	const grace = 500 * time.Millisecond
	r := newRunner(t, Options{Grace: grace})
	res, took := abortWhenReady(t, r, `import signal, time
signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
await tools.ready()
while True:
    time.sleep(0.01)`)
	wantStatus(t, res, StatusAbort)
	if took < grace || took > grace+5*time.Second {
		t.Errorf("the run took %v after the abort; want the grace, %v", took, grace)
	}
}

// TestSetsidOrphanDoesNotHoldTheRun leaves a process in a session of its own holding
// the output pipes (and, in the second case, fd 3): the run settles within the grace
// plus two seconds all the same.
func TestSetsidOrphanDoesNotHoldTheRun(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	r := newRunner(t, Options{Grace: grace})
	tests := []struct {
		name, end string
		status    Status
	}{
		{"completes", "return p.pid", StatusOK},
		{"exits", "os._exit(3)", StatusWorkerExit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pidFile := t.TempDir() + "/orphan.pid"
			start := time.Now()
			res := run(t, r, nil, testLimits, `import os, subprocess
p = subprocess.Popen(["/bin/sh", "-c", "sleep 30"], start_new_session=True, pass_fds=(3,))
open(`+strconv.Quote(pidFile)+`, "w").write(str(p.pid))
`+tt.end)
			took := time.Since(start)
			if data, err := os.ReadFile(pidFile); err == nil {
				pid, _ := strconv.Atoi(string(data))
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			}
			wantStatus(t, res, tt.status)
			if took > grace+2*time.Second+time.Second { // a second for the spawn itself
				t.Errorf("the run took %v; want at most the grace plus 2s", took)
			}
		})
	}
}

// TestMemoryBomb allocates past a 256 MiB address space: the program fails cleanly
// with MemoryError, and the host runs the next program as usual.
func TestMemoryBomb(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.AddressSpaceBytes = 256 << 20
	for _, src := range []string{
		"b = bytearray(1 << 30)",
		"x = []\nwhile True:\n    x.append(' ' * 1_000_000)",
	} {
		res := run(t, r, nil, lim, src)
		if res.Status != StatusException || !strings.Contains(res.Error, "MemoryError") {
			t.Errorf("%q: status %s, error %q; want an exception, MemoryError", src, res.Status, res.Error)
		}
	}
	wantValue(t, run(t, r, nil, lim, "return 'still fine'"), `"still fine"`)
}

// TestAbort cancels the context during a run, and before one.
func TestAbort(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ns := Namespace{Global: "tools", Funcs: map[string]Func{ // the run is under way: cancel it
		"sleep": func(callCtx context.Context, _ lossless.Value) (lossless.Value, error) {
			cancel()
			<-callCtx.Done()
			return nil, callCtx.Err()
		},
	}}
	res, err := r.Run(ctx, Program{Source: "print('waiting', flush=True)\nawait tools.sleep(None)", Namespaces: []Namespace{ns}, Limits: testLimits})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusAbort)
	if res.Error != "run aborted: context canceled" {
		t.Errorf("error %q", res.Error)
	}
	// At once, before any spawn: a spawn of this Runner's missing python would end the
	// run as worker-exit.
	none, err := NewRunner(context.Background(), Options{Python: filepath.Join(t.TempDir(), "no-python")})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	res, err = none.Run(ctx, Program{Source: "return 1"})
	if err != nil || res.Status != StatusAbort || res.Logs == nil || len(res.Logs) != 0 {
		t.Errorf("already cancelled: %+v, %v; want abort at once with no logs", res, err)
	}
}

// TestChildEnvironment checks the run directory (private, removed at settlement),
// the reduced environment, the working directory, fd 0 and the PID namespace.
func TestChildEnvironment(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	r := newRunner(t, Options{Dir: work})
	res := run(t, r, nil, testLimits, `import os, stat, sys
home = os.environ["HOME"]
return {
    "env": sorted(os.environ),
    "path": os.environ["PATH"],
    "tmp": os.environ["TMPDIR"] == home,
    "mode": oct(stat.S_IMODE(os.stat(home).st_mode)),
    "home": home,
    "cwd": os.getcwd(),
    "stdin": sys.stdin.read(),
    "pid": [os.getpid(), os.getppid()],
}`)
	wantStatus(t, res, StatusOK)
	obj := res.Value.(lossless.Object)
	get := func(k string) string {
		v, _ := obj.Get(k)
		return string(lossless.Encode(v))
	}
	home, _ := obj.Get("home")
	checks := map[string]string{
		"env":   `["HOME","LANG","PATH","TMPDIR"]`,
		"path":  `"/usr/local/bin:/usr/bin:/bin"`,
		"tmp":   "true",
		"mode":  `"0o700"`,
		"cwd":   string(lossless.Encode(lossless.String(work))),
		"stdin": `""`,
		"pid":   "[2,1]", // behind its init, in a PID namespace of its own
	}
	for k, want := range checks {
		if got := get(k); got != want {
			t.Errorf("%s = %s; want %s", k, got, want)
		}
	}
	// A completed run's directory goes with its teardown, which Close waits for.
	r.Close()
	if _, err := os.Stat(string(home.(lossless.String))); !os.IsNotExist(err) {
		t.Errorf("the run directory %s is still there: %v", home, err)
	}
	// A run the host ends is torn down before Run returns.
	r = newRunner(t, Options{Dir: work})
	res, _ = abortWhenReady(t, r, `import os, time
print(os.environ["HOME"], flush=True)
await tools.ready()
time.sleep(60)`)
	wantStatus(t, res, StatusAbort)
	if _, err := os.Stat(res.Logs[0]); !os.IsNotExist(err) {
		t.Errorf("the run directory %s is still there: %v", res.Logs[0], err)
	}
}

// TestBindingThatIgnoresCtx calls a binding that never returns until the test ends:
// the run ends at its wall clock all the same, the binding is abandoned, its result
// discarded, and Close returns without waiting for it. The run takes a warm child, so
// that its wall clock, which starts at hand-off, need not cover python's start.
func TestBindingThatIgnoresCtx(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	called, returned := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stuck)
		select {
		case <-called:
			<-returned // no goroutine outlives the test
		default:
		}
	}()
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"stuck": func(context.Context, lossless.Value) (lossless.Value, error) {
			close(called)
			defer close(returned)
			<-stuck
			return lossless.String("late"), nil
		},
	}}
	r, err := NewRunner(context.Background(), Options{Python: pythonPath, Grace: 300 * time.Millisecond, Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // a second Close, after the one timed below, does nothing
	lim := testLimits
	lim.Wall = 5 * time.Second
	p := Program{Source: "return await tools.stuck()", Namespaces: []Namespace{ns}, Limits: lim}
	if err := r.Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	idlePids(t, r, p, 1)
	res, err := r.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusTimeout)
	select {
	case <-called:
	default:
		t.Fatal("the program never called the binding within its wall clock")
	}
	if res.Wall > lim.Wall+10*time.Second { // ended, not waiting for the binding: a loaded machine's margin
		t.Errorf("the run took %v; want its wall clock, %v", res.Wall, lim.Wall)
	}
	closed := make(chan struct{})
	go func() {
		r.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waits for a binding that ignores its ctx")
	}
}

// TestOnlyFourDescriptors opens a file in the host without close-on-exec, as a host
// may have inherited one: the program sees fds 0 to 3 and nothing else but, if it
// awaits, its event loop's own.
func TestOnlyFourDescriptors(t *testing.T) {
	t.Parallel()
	fd, err := syscall.Open("/etc/hostname", syscall.O_RDONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer syscall.Close(fd)
	r := newRunner(t, Options{})
	const isOpen = `import asyncio, os
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
`
	// A child whose run came late (on a loaded machine) has warmed up: it has a loop.
	res := run(t, r, nil, testLimits, isOpen+`import gc
own = {fd for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)
       for fd in (o._selector.fileno(), o._ssock.fileno(), o._csock.fileno())}
return [fd for fd in range(1024) if is_open(fd) and fd not in own]`)
	wantValue(t, res, "[0,1,2,3]")
	res = run(t, r, nil, testLimits, isOpen+`await asyncio.sleep(0)
loop = asyncio.get_running_loop()
own = {loop._selector.fileno(), loop._ssock.fileno(), loop._csock.fileno()}
return [fd for fd in range(1024) if is_open(fd) and fd not in own]`)
	wantValue(t, res, "[0,1,2,3]")
}

// TestMaxProcesses checks the child's RLIMIT_NPROC, soft and hard: in a user namespace
// of its own, where the kernel counts its tasks alone, python and its init plus
// MaxProcesses, whatever other tasks its user has. Run as another user than root, whom
// the kernel does not hold to it, a fork bomb stops at the limit.
func TestMaxProcesses(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxProcesses = 5
	res := run(t, r, nil, lim, `import resource
return list(resource.getrlimit(resource.RLIMIT_NPROC))`)
	wantStatus(t, res, StatusOK)
	a := res.Value.(lossless.Array)
	soft, hard := int(a[0].(lossless.Number)), int(a[1].(lossless.Number))
	if soft != hard || soft != 2+5 {
		t.Errorf("RLIMIT_NPROC %d, %d; want python, its init and 5", soft, hard)
	}
	if os.Getuid() == 0 {
		t.Skip("root is not held to RLIMIT_NPROC: the fork bomb would not stop")
	}
	res = run(t, r, nil, lim, `import os, time
n = 0
try:
    for _ in range(100):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except BlockingIOError:
    pass
return n`)
	wantStatus(t, res, StatusOK)
	if n := int(res.Value.(lossless.Number)); n >= 100 {
		t.Errorf("forked %d children; want the limit to stop it", n)
	}
}

// TestOutOfMemoryReceivingReplies gathers replies larger together than the child's
// address space: the child says it ran out of memory receiving them, at once, rather
// than hanging until its wall clock or exiting without a word.
func TestOutOfMemoryReceivingReplies(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	r.stall = time.Minute // the child's memory, not the stall, is to end it
	big := lossless.String(strings.Repeat("y", 8<<20))
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"big": func(context.Context, lossless.Value) (lossless.Value, error) { return big, nil },
	}}
	lim := testLimits
	lim.AddressSpaceBytes = 200 << 20
	res, err := r.Run(context.Background(), Program{Namespaces: []Namespace{ns}, Limits: lim, Source: `import asyncio
out = await asyncio.gather(*[tools.big() for _ in range(40)])
return len(out)`})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusException)
	if !strings.Contains(res.Error, "MemoryError: out of memory while receiving binding replies") {
		t.Errorf("error %q; want the MemoryError, receiving replies", res.Error)
	}
	if res.Wall > lim.Wall/2 {
		t.Errorf("the run took %v; want it ended when memory ran out", res.Wall)
	}
}

// TestTheRunnersSetupIsNotTheRuns: the first spawn of a Runner makes the packages'
// archive (a compilation when the cache has none), which here takes longer than the
// program's whole wall limit; the run is not charged it, and ends ok.
func TestTheRunnersSetupIsNotTheRuns(t *testing.T) {
	t.Parallel()
	// The wall leaves a loaded machine's start of python room; the setup passes it.
	const setup, wall = 6 * time.Second, 5 * time.Second
	r := newRunner(t, Options{Precompile: true})
	r.setInstaller(func() (*python.Installer, error) {
		time.Sleep(setup) // the cost of a compilation, not a wait for anything
		return python.Cached(context.Background(), pythonPath, "kiln.program")
	})
	res := run(t, r, nil, Limits{CPUSeconds: 5, Wall: wall}, "return 1")
	wantValue(t, res, "1")
	if res.Wall >= wall {
		t.Errorf("wall %v; want under the limit, %v, the setup not counted", res.Wall, wall)
	}
}

// TestAChildThatDiesBeforeItsGateSaysHow runs an interpreter that writes to stderr and
// exits while the Runner is still making the packages' archive: the run reports how
// python ended, not a failure to limit a process that is gone.
func TestAChildThatDiesBeforeItsGateSaysHow(t *testing.T) {
	t.Parallel()
	fake := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'fake python: cannot start' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, Options{})
	r.opts.Python, r.python = fake, fake
	r.setInstaller(func() (*python.Installer, error) {
		time.Sleep(300 * time.Millisecond) // a compilation, long enough for the child to die
		return python.Sources(), nil
	})
	res := run(t, r, nil, testLimits, "return 1")
	if res.Status != StatusWorkerExit || res.ExitCode != 3 || !strings.Contains(strings.Join(res.Logs, "")+res.Error, "fake python: cannot start") {
		t.Errorf("got %s, exit code %d, error %q, logs %q; want worker-exit, 3, and its stderr", res.Status, res.ExitCode, res.Error, res.Logs)
	}
}

// TestAFailedMakingOfThePackagesIsNotKept has the first making of the archive fail:
// that run fails and says why, and the next run makes the archive again and runs.
func TestAFailedMakingOfThePackagesIsNotKept(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	var makings atomic.Int32
	r.setInstaller(func() (*python.Installer, error) {
		if makings.Add(1) == 1 {
			return nil, errors.New("too many open files")
		}
		return python.Sources(), nil
	})
	res := run(t, r, nil, testLimits, "return 1")
	if res.Status != StatusWorkerExit || !strings.Contains(res.Error, "too many open files") {
		t.Errorf("first run: %s %q; want worker-exit and the making's error", res.Status, res.Error)
	}
	wantValue(t, run(t, r, nil, testLimits, "return 1"), "1")
	if n := makings.Load(); n != 2 {
		t.Errorf("%d makings; want 2", n)
	}
}

// TestARunEndsWhileThePackagesAreMade ends a run's context while its child waits for
// the archive: the run is aborted then, not when the making ends.
func TestARunEndsWhileThePackagesAreMade(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	making, release := make(chan struct{}), make(chan struct{})
	r.setInstaller(func() (*python.Installer, error) {
		close(making)
		<-release // a compilation that takes as long as the test wants
		return python.Sources(), nil
	})
	defer close(release) // before the Runner's Close, which waits for the making
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan Result, 1)
	go func() {
		res, err := r.Run(ctx, Program{Source: "return 1", Limits: testLimits})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-making // the run's child waits for the archive
	cancel(errors.New("the caller gave up"))
	select {
	case res := <-done:
		if res.Status != StatusAbort || !strings.Contains(res.Error, "the caller gave up") {
			t.Errorf("got %s %q; want abort with the cause", res.Status, res.Error)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run still waited for the packages 30 s after its context ended")
	}
}

// TestADescendantWritingToFD3DoesNotHoldTheRun has python leave behind a process, out
// of its group, that writes a line to fd 3 every 50 ms for 10 s, and exit with code 5:
// the run ends worker-exit, code 5, within exitMostWait of the exit, not at its wall
// clock.
func TestADescendantWritingToFD3DoesNotHoldTheRun(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	began := time.Now()
	res := run(t, r, nil, Limits{CPUSeconds: 5, Wall: time.Minute}, `import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(200):
            os.write(3, b'{"kind":"log","text":"ghost"}\n')
            time.sleep(0.05)
    os._exit(0)
time.sleep(0.2)
os._exit(5)`)
	if res.Status != StatusWorkerExit || res.ExitCode != 5 || time.Since(began) > 10*time.Second {
		t.Errorf("got %s, exit code %d, after %v; want worker-exit, 5, soon after the exit", res.Status, res.ExitCode, time.Since(began))
	}
}

// TestCPUCheckedByTheHostAtCompletion: a program that ignores SIGXCPU and takes the
// child's own re-check away, then completes between the soft and the hard limit, is
// still a CPU timeout: the host measures the child's CPU time itself.
func TestCPUCheckedByTheHostAtCompletion(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, nil, Limits{CPUSeconds: 1, Wall: time.Minute}, `import gc, resource, signal
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
for o in gc.get_objects():
    if type(o).__name__ == "Child" and hasattr(o, "cpu_recheck"):
        o.cpu_recheck = lambda: None
def used():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
while used() < 1.4:
    pass
return "done"`)
	wantStatus(t, res, StatusTimeout)
	if !strings.Contains(res.Error, "CPU time limit of 1s exhausted") || res.CPU < time.Second {
		t.Errorf("error %q, CPU %v; want the CPU limit, past a second", res.Error, res.CPU)
	}
}

// TestCPUSecondsBound: MaxCPUSeconds runs; one past it, and the values that once
// wrapped to a small or nonsensical limit, are refused before anything runs.
func TestCPUSecondsBound(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, nil, Limits{CPUSeconds: MaxCPUSeconds, Wall: time.Minute}, "return 1")
	wantValue(t, res, "1")
	for _, n := range []int{MaxCPUSeconds + 1, 18446744074, 1<<62 - 1, 1<<63 - 2} {
		_, err := r.Run(context.Background(), Program{Source: "return 1", Limits: Limits{CPUSeconds: n}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "CPUSeconds") {
			t.Errorf("CPUSeconds %d: %v; want ErrInvalid naming CPUSeconds", n, err)
		}
	}
}

// TestNewRunnerSweepsStaleRunDirectories: the run directory of a host killed outright
// is removed by the next Runner made; a live host's is kept.
func TestNewRunnerSweepsStaleRunDirectories(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, fmt.Sprintf("kiln-program-p%d-1", dead.Process.Pid))
	live := filepath.Join(tmp, fmt.Sprintf("kiln-program-p%d-2", os.Getpid()))
	for _, d := range []string{stale, live} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	newRunner(t, Options{})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead host's run directory: %v; want it removed", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("this host's run directory: %v; want it kept", err)
	}
}
