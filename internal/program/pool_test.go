package program

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/poll"
)

// idlePids returns the pids of p's warm children, waiting until there are want.
func idlePids(t *testing.T, r *Runner, p Program, want int) []int {
	t.Helper()
	s, err := newSpec(p)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	warm := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		pids = nil
		if pl := r.pools[s.key]; pl != nil {
			for _, c := range pl.idle {
				pids = append(pids, c.proc.Program())
			}
		}
		return len(pids) >= want
	}
	if !poll.Wait(30*time.Second, warm) {
		t.Fatalf("%d warm children after 30s; want %d", len(pids), want)
	}
	return pids
}

func pidOf(t *testing.T, res Result) int {
	t.Helper()
	wantStatus(t, res, StatusOK)
	return int(res.Value.(lossless.Number))
}

// TestPoolHandsOutMatchingChildrenOnce warms two configurations and checks that each
// run takes a child booted for its own limits and namespaces, that a child serves one
// run only, and that the pool refills.
func TestPoolHandsOutMatchingChildrenOnce(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Pool: 2, Precompile: true})
	tb := &toolbox{}
	a := Program{Source: "import os\nreturn " + hostPid, Limits: testLimits, Namespaces: []Namespace{tb.namespace()}}
	b := a
	b.Limits.MaxLogBytes = 1000 // other limits
	c := a
	c.Namespaces = nil // other namespaces
	d := a
	d.Limits.Wall = 10 * time.Second // the wall clock is the host's: same boot as a

	ctx := context.Background()
	for _, p := range []Program{a, b} {
		if err := r.Warm(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	warmA := idlePids(t, r, a, 2)
	warmB := idlePids(t, r, b, 2)
	seen := map[int]bool{}
	for i, p := range []Program{a, d, b, c} {
		res, err := r.Run(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		pid := pidOf(t, res)
		if seen[pid] {
			t.Errorf("run %d: child %d served a second run", i, pid)
		}
		seen[pid] = true
		switch i {
		case 0, 1: // a, and d which boots as a does
			if !slices.Contains(warmA, pid) {
				t.Errorf("run %d: pid %d is not one of a's warm children %v", i, pid, warmA)
			}
		case 2:
			if !slices.Contains(warmB, pid) {
				t.Errorf("run %d: pid %d is not one of b's warm children %v", i, pid, warmB)
			}
		case 3:
			if slices.Contains(warmA, pid) || slices.Contains(warmB, pid) {
				t.Errorf("run %d: c, with other namespaces, got a warm child %d of another configuration", i, pid)
			}
		}
	}
	// a's pool refills with new children.
	again := idlePids(t, r, a, 2)
	for _, pid := range again {
		if seen[pid] {
			t.Errorf("child %d came back to the pool after its run", pid)
		}
	}
}

// TestPoolWallClockStartsAtHandOff parks a warm child longer than the wall clock
// allows a run, then runs on it. The wall clock leaves a loaded machine time to run.
func TestPoolWallClockStartsAtHandOff(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Pool: 1})
	p := Program{Source: "return 1", Limits: Limits{Wall: 3 * time.Second, CPUSeconds: 5}}
	if err := r.Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	idlePids(t, r, p, 1)
	time.Sleep(p.Limits.Wall + 500*time.Millisecond) // the parking under test: a lower bound only
	res, err := r.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	wantValue(t, res, "1")
	if res.Wall > p.Limits.Wall {
		t.Errorf("wall %v", res.Wall)
	}
}

// TestPoolSkipsDeadChildren kills a warm child and runs at once: the next run gets a
// live one, though the host has not yet seen the child die.
func TestPoolSkipsDeadChildren(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Pool: 1})
	p := Program{Source: "import os\nreturn " + hostPid, Limits: testLimits}
	if err := r.Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	pid := idlePids(t, r, p, 1)[0]
	syscall.Kill(pid, syscall.SIGKILL)
	res, err := r.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if got := pidOf(t, res); got == pid {
		t.Errorf("the dead child %d served the run", pid)
	}
}

// TestProgramCannotKillItsIdleSiblings runs a program that tries to SIGKILL every
// other child of its host, the idle children of the pool, found through the host's
// /proc: in a PID namespace of its own, it can signal none of them. The runs after it
// run their programs. It does not run in parallel: it would try the other tests'
// children.
func TestProgramCannotKillItsIdleSiblings(t *testing.T) {
	r := newRunner(t, Options{Pool: 3})
	p := Program{Source: "return 1", Limits: testLimits}
	if err := r.Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	killer := p
	killer.Source = siblings + `import signal
tried = killed = 0
for pid in siblings():
    tried += 1
    try:
        os.kill(pid, signal.SIGKILL)
        killed += 1
    except ProcessLookupError:
        pass
return [tried, killed]`
	res, err := r.Run(context.Background(), killer)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusOK)
	if a, _ := res.Value.(lossless.Array); len(a) != 2 || a[0].(lossless.Number) < 2 || a[1].(lossless.Number) != 0 {
		t.Fatalf("tried and killed %v children; want the two idle ones at least tried, none killed", res.Value)
	}
	for i := range 3 {
		res, err := r.Run(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != StatusOK {
			t.Errorf("run %d after the kill: %s (%s)", i, res.Status, res.Error)
		}
	}
}

// hostPid is a Python expression: the program's pid in the host's PID namespace, read
// from the host's /proc, which a program under none sees.
const hostPid = `int(os.readlink("/proc/self"))`

// siblings is Python that defines siblings(): the host's pids of the other children
// of the program's host (their inits), from the host's /proc.
const siblings = `import os
def parent(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
def siblings():
    me = ` + hostPid + `
    init = parent(me)
    host = parent(init)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if parent(int(pid)) == host and int(pid) != init:
                found.append(int(pid))
        except OSError:
            pass
    return found
`

// TestCloseReapsEverything closes a Runner with warm children and a run in progress:
// the run aborts, and no child or run directory is left.
func TestCloseReapsEverything(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{Pool: 2})
	running := make(chan struct{}, 1)
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"running": func(context.Context, lossless.Value) (lossless.Value, error) {
			running <- struct{}{}
			return nil, nil
		},
	}}
	p := Program{Source: "import os, time\nprint(" + hostPid + ", os.environ['HOME'], flush=True)\nawait tools.running()\ntime.sleep(60)",
		Namespaces: []Namespace{ns}, Limits: testLimits}
	if err := r.Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	pids := idlePids(t, r, p, 2)
	var dirs []string
	r.mu.Lock()
	for _, pl := range r.pools {
		for _, c := range pl.idle {
			dirs = append(dirs, c.dir)
		}
	}
	r.mu.Unlock()
	done := make(chan Result)
	go func() {
		res, _ := r.Run(context.Background(), p)
		done <- res
	}()
	select {
	case <-running:
	case res := <-done:
		t.Fatalf("the run ended before Close: %+v", res)
	}
	r.Close()
	res := <-done
	wantStatus(t, res, StatusAbort)
	if len(res.Logs) != 1 {
		t.Fatalf("logs %q; want the running child's pid and HOME", res.Logs)
	}
	fields := strings.Fields(res.Logs[0])
	pid, _ := strconv.Atoi(fields[0])
	pids = append(pids, pid)
	dirs = append(dirs, fields[1])
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("child %d is still there after Close", pid)
		}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("run directory %s is still there after Close", dir)
		}
	}
	if _, err := r.Run(context.Background(), p); err != ErrClosed {
		t.Errorf("Run after Close: %v; want ErrClosed", err)
	}
}

// TestSiblingCannotPlantCode runs a program that writes colorsys.py into the bootstrap
// archive, and beside it, of every other child of its host, the pool's idle ones, and a
// file into their HOME: the runs after it import the standard library's colorsys and
// find their HOME empty. It does not run in parallel: it writes into the other tests'
// children.
func TestSiblingCannotPlantCode(t *testing.T) {
	r := newRunner(t, Options{Pool: 3})
	p := Program{Source: `import colorsys, os
return [hasattr(colorsys, "PLANTED"), os.listdir(os.environ["HOME"]), os.environ["TMPDIR"] == os.environ["HOME"]]`, Limits: testLimits}
	if err := r.Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	planter := p
	planter.Source = siblings + `import zipfile
planted = 0
for pid in siblings():
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        continue
    bootstrap = argv[argv.index(b"-c") + 2]
    if os.path.isfile(bootstrap):  # an archive the child imports from, in its HOME
        with zipfile.ZipFile(os.fsdecode(bootstrap), "a") as z:
            z.writestr("colorsys.py", "PLANTED = True\n")
        bootstrap = os.path.dirname(bootstrap)
    with open(os.path.join(bootstrap, b"colorsys.py"), "w") as f:
        f.write("PLANTED = True\n")
    planted += 1
return planted`
	res, err := r.Run(context.Background(), planter)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusOK)
	if n, _ := res.Value.(lossless.Number); n < 2 {
		t.Fatalf("planted in %v children; want the two idle ones at least", res.Value)
	}
	for i := range 3 {
		res, err := r.Run(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != StatusOK || string(lossless.Encode(res.Value)) != "[false,[],true]" {
			t.Errorf("run %d after the planting: %s %s (%s); want [false,[],true]", i, res.Status, lossless.Encode(res.Value), res.Error)
		}
	}
}
