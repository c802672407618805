package zygote_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/sandbox/escapetest"
	"github.com/kilnrt/kiln/internal/worker"
	"github.com/kilnrt/kiln/internal/zygote"
	kilnpy "github.com/kilnrt/kiln/python"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

// python is the real interpreter python3 runs, and its package compiled once.
var python = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("python3", "-I", "-S", "-c", "import sys; print(sys.executable)").Output()
	return strings.TrimSpace(string(out)), err
})

var pkg = sync.OnceValues(func() (*kilnpy.Installer, error) {
	py, err := python()
	if err != nil {
		return nil, err
	}
	return kilnpy.Precompiled(context.Background(), py, "kiln.worker", "kiln.hooks", "kiln.limits", "kiln.zygote")
})

var testHost = sync.OnceValue(func() *sandbox.Host { return sandbox.Probe(context.Background(), nil) })

func TestForkedWorkerRunsCells(t *testing.T) {
	pool := zygote.NewPool(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	defer pool.Close()
	for _, profile := range []string{"none", "workspace"} {
		t.Run(profile, func(t *testing.T) {
			prof, err := sandbox.ParseProfile(profile)
			if err != nil {
				t.Fatal(err)
			}
			w := startIn(t, pool, sandbox.Policy{Profile: prof, Work: t.TempDir()}, "g-1")
			if got := w.Sandbox(); got.Start != sandbox.StartForked {
				t.Fatalf("applied %+v; want forked", got)
			}
			rec, err := w.Execute(t.Context(), "c1", "import os; print(os.getpid()); 1+1")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v %+v", rec, w.Sandbox())
		})
	}
}

// A forked generation makes no file: its control socket is a socket pair, and its
// skills and tool catalog reach it through pipes, which it reads as a spawned one reads
// its files.
func TestForkedWorkerMakesNoFile(t *testing.T) {
	pool := zygote.NewPool(nil)
	defer pool.Close()
	startIn(t, pool, sandbox.Policy{Work: t.TempDir()}, "g-1") // the zygote's own directory is made once
	mine := func() []string {
		names, _ := filepath.Glob(filepath.Join(os.TempDir(), "kiln-worker-p"+strconv.Itoa(os.Getpid())+"-*"))
		return names
	}
	before := mine()
	cfg := workerConfig(t, sandbox.Policy{Work: t.TempDir()}, "g-2")
	cfg.Forker, cfg.Sandbox, cfg.SandboxHost = pool, sandbox.Policy{}, nil
	cfg.Skills = []byte(`{"revision": "r-1", "skills": [{"id": "demo", "body": "a skill"}]}`)
	cfg.SkillsRevision = "r-1"
	cfg.Tools = []byte(`{"tools": [{"namespace": "demo", "name": "echo", "attr": "echo", "description": "d"}]}`)
	w, err := worker.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(time.Second)
	if got := w.Sandbox().Start; got != sandbox.StartForked {
		t.Fatalf("started %s; want forked", got)
	}
	if after := mine(); !slices.Equal(after, before) {
		t.Errorf("directories %q after the fork; want %q", after, before)
	}
	if out := cellText(t, w, "c1", `import kiln; print(kiln.skills.revision, kiln.skills.demo.__doc__, dir(tools))`); out != "r-1 a skill ['demo']\n" {
		t.Errorf("the cell printed %q; want the skills and the tools handed over", out)
	}
}

// startIn starts a generation forked from pool, confined by pol, working in its Work.
func startIn(t *testing.T, pool *zygote.Pool, pol sandbox.Policy, gen string) *worker.Worker {
	t.Helper()
	return startWith(t, pool, pol, gen, nil)
}

// startWith is startIn with the environment env (nil: this process's); a nil pool
// spawns the generation.
func startWith(t *testing.T, pool *zygote.Pool, pol sandbox.Policy, gen string, env []string) *worker.Worker {
	t.Helper()
	cfg := workerConfig(t, pol, gen)
	cfg.Env = env
	if pool != nil {
		cfg.Forker = pool
	}
	w, err := worker.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Shutdown(time.Second) })
	return w
}

// workerConfig is the configuration of generation gen of a worker confined by pol.
func workerConfig(t *testing.T, pol sandbox.Policy, gen string) worker.Config {
	t.Helper()
	py, err := python()
	if err != nil {
		t.Fatal(err)
	}
	in, err := pkg()
	if err != nil {
		t.Fatal(err)
	}
	return worker.Config{Python: py, Package: in, SessionID: "s", Generation: gen,
		Dir: pol.Work, Sandbox: pol, SandboxHost: testHost()}
}

// cellText runs code in w and returns its stdout.
func cellText(t *testing.T, w *worker.Worker, id, code string) string {
	t.Helper()
	rec, err := w.Execute(t.Context(), id, code)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, o := range rec.Output {
		if o.Stream == "stdout" {
			out.WriteString(o.Text)
		}
	}
	if rec.Status != "ok" {
		t.Fatalf("cell %s: %+v", id, rec)
	}
	return out.String()
}

// orphanCell double-forks 100 processes that exit at once, orphans of the worker's
// namespace, then runs a command that exits 3, and prints the command's status, the
// zombies left among the children of the worker and of its parent once the orphans had
// ten seconds to be reaped, and the worker's parent's pid in its namespace.
const orphanCell = `import os, subprocess, time
def stat(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()
me = int(os.readlink("/proc/self"))  # as the /proc it sees numbers it
above = int(stat(me)[1])
for _ in range(100):
    if os.fork() == 0:
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.wait()
status = subprocess.run(["sh", "-c", "exit 3"]).returncode
def zombies():
    n = 0
    for pid in (above, me):
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                for child in f.read().split():
                    try:
                        n += stat(int(child))[0] == "Z"
                    except OSError:
                        pass
    return n
deadline = time.monotonic() + 10
while zombies() and time.monotonic() < deadline:
    time.sleep(0.01)
print(status, zombies(), os.getppid())`

// TestOrphansAreReapedBehindTheWorker runs orphanCell in workers forked and spawned,
// under none and workspace: the init in front of each worker reaps the orphans, and
// the command's status still reaches subprocess. What the start reports applied names
// exactly the namespaces /proc shows the worker apart in.
func TestOrphansAreReapedBehindTheWorker(t *testing.T) {
	pool := zygote.NewPool(nil)
	t.Cleanup(func() { pool.Close() }) // after the parallel subtests
	profiles := []string{sandbox.ProfileNone}
	if m := testHost().Mechanisms(); m.Namespaces && m.Landlock > 0 && m.Seccomp {
		profiles = append(profiles, sandbox.ProfileWorkspace)
	}
	for _, profile := range profiles {
		for _, start := range []string{sandbox.StartForked, sandbox.StartSpawned} {
			t.Run(profile+"/"+start, func(t *testing.T) {
				t.Parallel()
				from := pool
				if start == sandbox.StartSpawned {
					from = nil
				}
				w := startWith(t, from, sandbox.Policy{Profile: sandbox.Profile{Name: profile}, Work: t.TempDir()}, "g-1", nil)
				if got := w.Sandbox().Start; got != start {
					t.Fatalf("started %s; want %s", got, start)
				}
				apart, err := escapetest.Namespaces(w.Pid())
				if err != nil {
					t.Fatal(err)
				}
				if got := w.Sandbox().Namespaces; !slices.Equal(got, apart) || !slices.Contains(got, "pid") {
					t.Errorf("reported namespaces %v; the worker is apart in %v", got, apart)
				}
				if out := cellText(t, w, "c1", orphanCell); out != "3 0 1\n" {
					t.Errorf("status, zombies and parent %q; want 3 0 1", out)
				}
			})
		}
	}
}

// TestForkedEscapes runs the sandbox's escape suite in forked workers under workspace
// and strict: each escape is refused (the network only under strict), and the worker
// has no capability left.
func TestForkedEscapes(t *testing.T) {
	h := testHost()
	if m := h.Mechanisms(); !m.Namespaces || m.Landlock < 6 || !m.Seccomp {
		t.Skipf("the kernel lacks what the workspace profile needs: %+v", m)
	}
	w := escapetest.NewWorld(t)
	pool := zygote.NewPool(nil)
	defer pool.Close()
	for _, profile := range []string{sandbox.ProfileWorkspace, sandbox.ProfileStrict} {
		pol := sandbox.Policy{Profile: sandbox.Profile{Name: profile}, Work: w.Work, Hide: []string{w.Data}}
		wk := startIn(t, pool, pol, "g-"+profile)
		if got := wk.Sandbox(); got.Start != sandbox.StartForked || got.Landlock == 0 || !got.Seccomp {
			t.Fatalf("applied %+v; want forked under Landlock and seccomp", got)
		}
		cellText(t, wk, "pre", escapetest.Preamble)
		if out := cellText(t, wk, "caps", `print([l.split()[1] for l in open("/proc/self/status") if l.startswith("Cap")])`); out != "['0000000000000000', '0000000000000000', '0000000000000000', '0000000000000000', '0000000000000000']\n" {
			t.Errorf("%s: capabilities %s; want none", profile, out)
		}
		for i, a := range w.Attempts(os.Getpid()) {
			t.Run(profile+"/"+a.Name, func(t *testing.T) {
				out := cellText(t, wk, "a"+strconv.Itoa(i), a.Code)
				a.Check(t, profile, out)
			})
		}
	}
	select {
	case <-w.Accepted:
		t.Errorf("the daemon's socket saw a connection")
	default:
	}
}

// zygotePid is the pid of the zygote: a child of this process running kiln.zygote in
// its PID namespace (the workers forked from it are children of this process too, in
// namespaces of their own).
func zygotePid(t *testing.T) int {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	ns, _ := os.Readlink("/proc/self/ns/pid")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err1 := os.ReadFile(d + "/stat")
		cmd, err2 := os.ReadFile(d + "/cmdline")
		theirs, _ := os.Readlink(d + "/ns/pid")
		if err1 != nil || err2 != nil || theirs != ns || !bytes.Contains(cmd, []byte("kiln.zygote")) {
			continue
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == self {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	t.Fatal("no zygote among this process's children")
	return 0
}

// TestZygoteKilledMidOpen stops the zygote so that a worker's start waits on it: the
// pool kills it past its reply timeout, the start spawns instead and says why, and the
// pool starts another zygote, which the next worker is forked from. The same after the
// zygote is killed between starts. Workers forked before live on.
func TestZygoteKilledMidOpen(t *testing.T) {
	pool := zygote.NewPool(nil)
	defer pool.Close()
	pol := sandbox.Policy{Profile: sandbox.Profile{Name: sandbox.ProfileWorkspace, BestEffort: true}, Work: t.TempDir()}
	first := startIn(t, pool, pol, "g-1")
	if got := first.Sandbox(); got.Start != sandbox.StartForked {
		t.Fatalf("first worker %+v; want forked", got)
	}
	syscall.Kill(zygotePid(t), syscall.SIGSTOP)
	second := startIn(t, pool, pol, "g-2")
	if got := second.Sandbox(); got.Start != sandbox.StartSpawned || !strings.Contains(got.NotForked, "zygote") {
		t.Errorf("second worker %+v; want spawned, saying why not forked", got)
	}
	if out := cellText(t, second, "c", "print(1+1)"); out != "2\n" {
		t.Errorf("the spawned worker printed %q", out)
	}
	poll.Until(t, 30*time.Second, func() bool { return pool.Stats().Restarts >= 1 })
	third := startIn(t, pool, pol, "g-3")
	if got := third.Sandbox(); got.Start != sandbox.StartForked {
		t.Errorf("third worker %+v; want forked from the zygote started again", got)
	}
	syscall.Kill(zygotePid(t), syscall.SIGKILL)
	poll.Until(t, 30*time.Second, func() bool { return pool.Stats().Restarts >= 2 })
	fourth := startIn(t, pool, pol, "g-4")
	if got := fourth.Sandbox(); got.Start != sandbox.StartForked {
		t.Errorf("fourth worker %+v; want forked from the zygote started again", got)
	}
	for i, w := range []*worker.Worker{first, third, fourth} {
		if out := cellText(t, w, "c", "print(2+2)"); out != "4\n" {
			t.Errorf("worker %d printed %q", i, out)
		}
	}
}

// TestForkedWorkerHoldsNoOtherEnvironment forks a worker with a secret in its
// environment, then another: the second's memory, inherited from the zygote, holds
// nothing of the first's environment, which the same scan finds in the first's.
func TestForkedWorkerHoldsNoOtherEnvironment(t *testing.T) {
	pool := zygote.NewPool(nil)
	defer pool.Close()
	secret := "kiln-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	first := startWith(t, pool, sandbox.Policy{Work: t.TempDir()}, "g-1", append(os.Environ(), "SECRET="+secret))
	if out := cellText(t, first, "c", "import os; print(os.environ['SECRET'])"); out != secret+"\n" {
		t.Fatalf("the first worker's SECRET: %q", out)
	}
	second := startIn(t, pool, sandbox.Policy{Work: t.TempDir()}, "g-2")
	if first.Sandbox().Start != sandbox.StartForked || second.Sandbox().Start != sandbox.StartForked {
		t.Fatalf("%+v %+v; want both forked", first.Sandbox(), second.Sandbox())
	}
	// The secret is looked for in halves, so that the search puts no copy of it in memory.
	half := len(secret) / 2
	scan := `import re
h1, h2 = b"` + secret[:half] + `", b"` + secret[half:] + `"
found = 0
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
        if not m or "[vvar" in line or "[vsyscall" in line:
            continue
        start, end = int(m[1], 16), int(m[2], 16)
        try:
            mem.seek(start)
            data = mem.read(end - start)
        except (OSError, ValueError, OverflowError):
            continue
        i = data.find(h1)
        while i >= 0:
            found += data[i + len(h1):i + len(h1) + len(h2)] == h2
            i = data.find(h1, i + 1)
print(found)`
	if out := cellText(t, first, "scan", scan); out == "0\n" {
		t.Fatalf("the scan finds no secret in the first worker's memory, which holds it")
	}
	if out := cellText(t, second, "scan", scan); out != "0\n" {
		t.Errorf("the second worker's memory holds the first's secret %s times", strings.TrimSpace(out))
	}
}

// TestASlowForkLeavesNoZombie: a forked child whose first report line comes after the
// start's deadline (the zygote's answer is held here until then) is ended and reaped
// by the host, whose child it is, rather than left to die at its next report as a
// zombie; the start fails (it would be spawned, but its deadline has passed).
func TestASlowForkLeavesNoZombie(t *testing.T) {
	t.Parallel()
	pool := zygote.NewPool(nil)
	defer pool.Close()
	pol := sandbox.Policy{Profile: sandbox.Profile{Name: sandbox.ProfileNone}, Work: t.TempDir()}
	startIn(t, pool, pol, "g-1") // the zygote runs: the next answer comes at once
	pids := make(chan int, 1)
	zygote.HoldAnswers(pool, func(ctx context.Context, pid int) {
		pids <- pid
		<-ctx.Done()
	})
	cfg := workerConfig(t, pol, "g-2")
	cfg.Forker = pool
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	w, err := worker.Start(ctx, cfg)
	if err == nil {
		w.Shutdown(time.Second)
		t.Fatal("a start whose fork was held past its deadline succeeded")
	}
	var pid int
	select {
	case pid = <-pids:
	default:
		t.Fatalf("the zygote answered no fork: %v", err)
	}
	proc := "/proc/" + strconv.Itoa(pid)
	if !poll.Wait(10*time.Second, func() bool { _, err := os.Stat(proc); return err != nil }) {
		state, _ := os.ReadFile(proc + "/stat")
		t.Fatalf("the forked child %d is still there: %s", pid, state)
	}
}
