package scripttests

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestScripts(t *testing.T) {
	// The scripts' kiln finds python3 in PATH. Where that is a wrapper (a version
	// manager's shim), kiln says so on stderr at every start, which the scripts that
	// check stderr would read: they are given what it runs instead.
	python, err := interp.Find(t.Context(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Dir(clitest.Command(t).Path) // the kiln the scripts run
	testscript.Run(t, testscript.Params{Dir: "testdata/script", Setup: func(env *testscript.Env) error {
		env.Setenv("PATH", bin+string(filepath.ListSeparator)+env.Getenv("PATH"))
		env.Setenv("XDG_DATA_HOME", filepath.Join(env.WorkDir, "xdg"))
		env.Setenv(kiln.PythonEnv, python.Path)
		return nil
	}, Cmds: map[string]func(*testscript.TestScript, bool, []string){"killworkers": killWorkers, "untime": untime, "waitfile": waitFile}})
}

// stampAndDuration is a record's started_at and duration_ms as kiln prints them.
var stampAndDuration = regexp.MustCompile(`"started_at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z","duration_ms":\d+`)

// untime is the script command "untime FILE": it prints FILE, a cell record a line,
// with each record's started_at and duration_ms as "T" and 0, so that it compares
// with a file written beforehand; a line with an event ("event") is left as it is,
// and a record without both, or with a time not in RFC 3339 UTC milliseconds, fails.
func untime(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: untime FILE")
	}
	for _, line := range strings.SplitAfter(ts.ReadFile(args[0]), "\n") {
		if line != "" && !strings.HasPrefix(line, `{"event":`) {
			if !stampAndDuration.MatchString(line) {
				ts.Fatalf("no started_at and duration_ms in %s", line)
			}
			line = stampAndDuration.ReplaceAllString(line, `"started_at":"T","duration_ms":0`)
		}
		ts.Stdout().Write([]byte(line))
	}
}

// killWorkers is the script command "killworkers READY DONE MODULE": once the file READY
// exists, it kills with SIGKILL every process of this script (descended from a process
// that runs in the script's directory: scripts run in parallel) that runs the Python
// module MODULE, waiting for one to be there, and writes how many it killed to the file
// DONE. A cell cannot do this itself: it reaches no process outside its own PID namespace.
func killWorkers(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: killworkers READY DONE MODULE")
	}
	done := ts.MkAbs(args[1])
	waitFile(ts, false, args[:1])
	deadline := time.Now().Add(10 * time.Second)
	work, err := filepath.EvalSymlinks(ts.MkAbs("."))
	ts.Check(err)
	type proc struct {
		pid    int
		script bool // it or an ancestor below the test runs in the script's directory
	}
	killed := 0
	for ; killed == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		queue := []proc{{pid: os.Getpid()}}
		for ; len(queue) > 0; queue = queue[1:] {
			p := queue[0]
			for _, child := range leakcheck.Children(p.pid) {
				cwd, _ := os.Readlink("/proc/" + strconv.Itoa(child) + "/cwd")
				queue = append(queue, proc{child, p.script || cwd == work})
			}
			if !p.script {
				continue
			}
			cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
			if bytes.Contains(cmdline, []byte("\x00"+args[2]+"\x00")) && syscall.Kill(p.pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	// Whole or absent: written aside, then renamed.
	ts.Check(os.WriteFile(done+".new", []byte(strconv.Itoa(killed)), 0o644))
	ts.Check(os.Rename(done+".new", done))
}

// waitFile is the script command "waitfile FILE": it waits for FILE to exist, at most
// clitest.ReadyWithin. A script's background command signals its readiness so: the
// socket of a daemon serving, a file a cell writes once it runs.
func waitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile FILE")
	}
	path := ts.MkAbs(args[0])
	if !poll.Wait(clitest.ReadyWithin, func() bool { _, err := os.Stat(path); return err == nil }) {
		ts.Fatalf("no %s within %v", args[0], clitest.ReadyWithin)
	}
}
