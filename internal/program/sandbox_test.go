package program

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/sandbox"
)

// sandboxHost is the mechanisms the package's confined runs use, probed once.
var sandboxHost = sync.OnceValue(func() *sandbox.Host { return sandbox.Probe(context.Background(), nil) })

// poolAttacks are what a program in the warm pool tries against its idle siblings,
// whose pids it is given: take a descriptor (fd 3, the host's channel) with
// pidfd_getfd, stop one with SIGSTOP (and let it go again), and leave a double-forked
// process behind, past its run, to answer for later ones. Each program returns
// "escaped" or "refused: …".
func poolAttacks(marker string) map[string]string {
	const prelude = `import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
mine = os.getpid()
errs = []
`
	return map[string]string{
		"pidfd_getfd": prelude + `for pid in PIDS:
    if pid == mine:
        continue
    try:
        fd = os.pidfd_open(pid)
        got = libc.syscall(438, fd, 3, 0)
        if got < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        return "escaped"
    except OSError as e:
        errs.append(str(e))
return "refused: " + "; ".join(errs)`,
		"sigstop": prelude + `for pid in PIDS:
    if pid == mine:
        continue
    try:
        os.kill(pid, signal.SIGSTOP)
        os.kill(pid, signal.SIGCONT)
        return "escaped"
    except OSError as e:
        errs.append(str(e))
return "refused: " + "; ".join(errs)`,
		"double fork": prelude + fmt.Sprintf(`if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", %q])
    os._exit(0)
os.wait()
return "left"`, marker),
	}
}

// TestPoolChildrenCannotReachEachOther runs the pool attacks under the workspace
// profile and under none: each child in a PID namespace of its own, each is refused.
func TestPoolChildrenCannotReachEachOther(t *testing.T) {
	host := sandboxHost()
	if m := host.Mechanisms(); !m.Namespaces || m.Landlock < 6 || !m.Seccomp {
		t.Skipf("the kernel lacks what the workspace profile needs: %+v", m)
	}
	for _, profile := range []string{sandbox.ProfileWorkspace, sandbox.ProfileNone} {
		marker := fmt.Sprintf("%d.%09d", 7000+rand.IntN(1000), rand.IntN(1_000_000_000))
		t.Cleanup(func() {
			for _, pid := range leakcheck.WithArg(marker) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		for name, src := range poolAttacks(marker) {
			t.Run(profile+"/"+name, func(t *testing.T) {
				r := newRunner(t, Options{Pool: 2, Precompile: true, Dir: t.TempDir(),
					Sandbox: sandbox.Policy{Profile: sandbox.Profile{Name: profile}}, SandboxHost: host})
				p := Program{Source: src, Limits: testLimits}
				wantStatus(t, run(t, r, nil, testLimits, "return 1"), StatusOK) // the pool warms at a first run
				pids := idlePids(t, r, p, 2)
				res := run(t, r, nil, testLimits, strings.ReplaceAll(src, "PIDS", pyList(pids)))
				wantStatus(t, res, StatusOK)
				got := string(res.Value.(lossless.String))
				if res.Sandbox.Profile != profile {
					t.Errorf("sandbox %+v; want profile %s", res.Sandbox, profile)
				}
				if name == "double fork" {
					r.Close() // every child reaped
					// Its namespace ends with its init, which ends when python does.
					if !poll.Wait(10*time.Second, func() bool { return len(leakcheck.WithArg(marker)) == 0 }) {
						t.Fatalf("the double fork's process outlived its run by 10s")
					}
					return
				}
				if !strings.HasPrefix(got, "refused") {
					t.Errorf("got %q under %s", got, profile)
				}
			})
		}
	}
}

// pyList is pids as a Python list.
func pyList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = fmt.Sprint(p)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// TestConfinedRunEndsItsGroup leaves a process in the child's group under the workspace
// profile: it has ended once the runner has closed, with the child's PID namespace. Its
// processes are the cgroup's to limit (pids.max), not RLIMIT_NPROC's.
func TestConfinedRunEndsItsGroup(t *testing.T) {
	t.Parallel()
	host := sandboxHost()
	if m := host.Mechanisms(); !m.Namespaces || m.Landlock < 6 || !m.Seccomp || m.Cgroup == "" {
		t.Skipf("the kernel lacks what the workspace profile with cgroups needs: %+v", m)
	}
	var inherited syscall.Rlimit
	if err := syscall.Getrlimit(unix.RLIMIT_NPROC, &inherited); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("%d.%09d", 8000+rand.IntN(1000), rand.IntN(1_000_000_000))
	t.Cleanup(func() {
		for _, pid := range leakcheck.WithArg(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	r := newRunner(t, Options{Dir: t.TempDir(), Sandbox: sandbox.Policy{Profile: sandbox.Profile{Name: sandbox.ProfileWorkspace}},
		SandboxHost: host})
	res := run(t, r, nil, testLimits, `import resource, subprocess
subprocess.Popen(["sleep", "`+marker+`"])
return resource.getrlimit(resource.RLIMIT_NPROC)[0]`)
	wantStatus(t, res, StatusOK)
	nproc := uint64(res.Value.(lossless.Number))
	if res.Sandbox.Processes != DefaultMaxProcesses+keeperTasks+1 {
		t.Errorf("sandbox %+v; want a pids limit of %d", res.Sandbox, DefaultMaxProcesses+keeperTasks+1)
	}
	if nproc != min(inherited.Cur, 1<<62) && inherited.Cur < 1<<62 {
		t.Errorf("RLIMIT_NPROC %d; want the host's own, %d", nproc, inherited.Cur)
	}
	r.Close() // every child torn down
	// The program's namespace ended with its init, before the host reaped the init.
	if left := leakcheck.WithArg(marker); len(left) > 0 {
		t.Errorf("the process the program left, %v, is alive after the run", left)
	}
}
