// Package leakcheck fails a test binary that leaves goroutines, processes or temporary
// files behind, and finds the processes a test started but cannot reach.
//
// A package applies it through TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }
//
// Run runs the tests, then waits up to Grace for the goroutines started since (other
// than the runtime's and the testing package's own), the test binary's child processes
// and its temporary files to be gone, and fails the run with their stacks, command lines
// and names if any is left. A temporary file is the binary's when its name in the
// temporary directory carries its pid as "-p<pid>-", as a worker's kiln-worker-p<pid>-*
// directory does. A test binary that a checked run's test starts again, as a helper, is
// not checked itself.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Grace is how long Run waits for goroutines, processes and files to be gone after the
// tests.
const Grace = 5 * time.Second

// poll is how often Run looks again while it waits.
const poll = 20 * time.Millisecond

// Runner is what runs a package's tests: *testing.M, or a wrapper of it.
type Runner interface{ Run() int }

// Run runs m and returns its exit code, or 1 if m passed but left goroutines, processes
// or temporary files behind, which it reports on stderr.
func Run(m Runner) int { return run(m, Grace) }

// RunIsolated is Run with a temporary directory of the tests' own: TMPDIR names a new
// directory for the tests and every process they start, and anything left in it after
// the tests, whatever its name, is left behind. It is for tests that start processes
// which may leave files without the pid in their names (a helper that is killed, say).
func RunIsolated(m Runner) int {
	if os.Getenv(nested) != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", isolatedPrefix)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leakcheck: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	old, had := os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", dir)
	defer func() {
		if had {
			os.Setenv("TMPDIR", old)
		} else {
			os.Unsetenv("TMPDIR")
		}
	}()
	return run(m, Grace)
}

// Wrap is m checked as Run checks it, for a TestMain that hands its Runner on (as
// testscript.Main does).
func Wrap(m Runner) Runner { return checked{m} }

type checked struct{ m Runner }

func (c checked) Run() int { return Run(c.m) }

// isolatedPrefix starts the names of RunIsolated's temporary directories.
const isolatedPrefix = "leakcheck-isolated-"

// nested marks the environment of a checked run: a test binary that a test starts
// again as a helper (a process to kill, say) is checked by the run that started it, not
// by itself.
const nested = "KILN_LEAKCHECK_RUN"

// run is Run waiting at most grace.
func run(m Runner, grace time.Duration) int {
	if os.Getenv(nested) != "" {
		return m.Run()
	}
	os.Setenv(nested, "1")
	defer os.Unsetenv(nested)
	before := goroutines()
	code := m.Run()
	if code != 0 {
		return code
	}
	var leaked []string
	for deadline := time.Now().Add(grace); ; time.Sleep(poll) {
		leaked = slices.Concat(extra(before, goroutines()), childProcesses(), temporaryFiles())
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(leaked) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "leakcheck: %d left behind after the tests (%s after they ended):\n\n%s\n",
		len(leaked), grace, strings.Join(leaked, "\n\n"))
	return 1
}

// temporaryFiles describes the files of the temporary directory whose names carry this
// process's pid as -p<pid>-, or all of them in a directory of RunIsolated's.
func temporaryFiles() []string {
	pattern := "*-p" + strconv.Itoa(os.Getpid()) + "-*"
	if strings.HasPrefix(filepath.Base(os.TempDir()), isolatedPrefix) {
		pattern = "*"
	}
	mine, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
	var out []string
	for _, name := range mine {
		out = append(out, "temporary file "+name)
	}
	return out
}

// ignored are the packages whose goroutines belong to the runtime or the test framework,
// not to a test: a goroutine created by one of them, or by no one, is not counted.
var ignored = []string{"testing.", "runtime.", "os/signal."}

// goroutines is every goroutine's stack but the caller's, keyed by what started it.
func goroutines() map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := map[string]int{}
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the caller's own
			continue
		}
		stacks[signature(g)]++
	}
	return stacks
}

// signature names a goroutine by the function it is in and the one that created it,
// without addresses or arguments; "" for one that is not counted.
func signature(stack string) string {
	lines := strings.Split(strings.TrimSpace(stack), "\n")
	if len(lines) < 2 {
		return ""
	}
	created := ""
	for _, l := range lines {
		if c, ok := strings.CutPrefix(l, "created by "); ok {
			created = trimCall(c)
		}
	}
	if created == "" || slices.ContainsFunc(ignored, func(p string) bool { return strings.HasPrefix(created, p) }) {
		return ""
	}
	return trimCall(lines[1]) + " (created by " + created + ")"
}

// trimCall is a stack line's function, without its arguments or goroutine id.
func trimCall(line string) string {
	if i := strings.LastIndex(line, "("); i > 0 {
		line = line[:i]
	}
	if i := strings.Index(line, " in goroutine"); i > 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

// extra describes the goroutines of now that were not in before.
func extra(before, now map[string]int) []string {
	var out []string
	for sig, n := range now {
		if sig != "" && n > before[sig] {
			out = append(out, fmt.Sprintf("%d goroutine(s) in %s", n-before[sig], sig))
		}
	}
	slices.Sort(out)
	return out
}

// childProcesses describes the test binary's live (not zombie) child processes.
func childProcesses() []string {
	var out []string
	for _, pid := range Children(os.Getpid()) {
		if Alive(pid) {
			out = append(out, fmt.Sprintf("process %d: %s", pid, commandLine(pid)))
		}
	}
	return out
}

// Children lists the children of pid, from every one of its threads.
func Children(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var pids []int
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(field); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// Alive reports whether pid is a live process: not gone, not a zombie.
func Alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && !bytes.HasPrefix(stat[i+1:], []byte(" Z")) && !bytes.HasPrefix(stat[i+1:], []byte(" X"))
}

// WithArg lists the live processes with arg among their arguments: how a test finds the
// processes that processes it started started in turn, wherever they went.
func WithArg(arg string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, dir := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !bytes.Contains(append([]byte{0}, cmdline...), []byte("\x00"+arg+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(dir)); err == nil && Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// commandLine is pid's command line, arguments separated by spaces.
func commandLine(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.Join(strings.Split(strings.TrimRight(string(data), "\x00"), "\x00"), " ")
}
