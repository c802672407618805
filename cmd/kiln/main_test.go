package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
)

func TestMain(m *testing.M) { clitest.Main(m, main) }

func TestReplCtrlCInterruptsTheCellNotTheRepl(t *testing.T) {
	cmd := clitest.Command(t, "repl")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewReader(stdout)
	io.WriteString(stdin, "x = 7\nprint('looping', flush=True)\n")
	clitest.ExpectLine(t, lines, "looping")
	io.WriteString(stdin, "if True:\n    print('spinning', flush=True)\n    while True: pass\n\n")
	clitest.ExpectLine(t, lines, "spinning") // the cell runs: the Ctrl-C is its interrupt
	cmd.Process.Signal(os.Interrupt)
	io.WriteString(stdin, "x * 6\n")
	clitest.ExpectLine(t, lines, "42")
	stdin.Close() // Ctrl-D
	if err := cmd.Wait(); err != nil {
		t.Fatalf("repl exited with %v; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "KeyboardInterrupt") || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not show the interrupt:\n%s", stderr.String())
	}
}

func TestAHostThatDiesTakesItsWorkerWithIt(t *testing.T) {
	cmd := clitest.Command(t, "exec", "import time\ntime.sleep(100)")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	worker := clitest.WaitForChild(t, cmd.Process.Pid)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !poll.Wait(5*time.Second, func() bool { return !clitest.ProcessExists(worker) }) {
		syscall.Kill(worker, syscall.SIGKILL)
		t.Fatalf("worker %d outlived its host", worker)
	}
}

// TestAHostKilledTakesEveryProcessOfItsCells starts, from the cells of a real kiln exec,
// one sleeper by each route out of a parent's reach (a plain child, a new session,
// setsid, nohup in a shell that exits, a double fork), kills the host with SIGKILL, and
// requires every sleeper gone within 10s: a loaded machine's bound for what would
// otherwise live for an hour and more.
func TestAHostKilledTakesEveryProcessOfItsCells(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("%d.%09d", 5000+rand.IntN(1000), rand.IntN(1_000_000_000))
	t.Cleanup(func() {
		for _, pid := range leakcheck.WithArg(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	cmd := clitest.Command(t, "exec", "--data", t.TempDir(),
		fmt.Sprintf("import os, subprocess, time\nm = %q\nsubprocess.Popen(['sleep', m])", marker),
		"subprocess.Popen(['sleep', m], start_new_session=True)",
		"subprocess.Popen(['setsid', 'sleep', m])",
		"subprocess.Popen(['sh', '-c', 'nohup sleep ' + m + ' >/dev/null 2>&1 &'])",
		"if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execvp('sleep', ['sleep', m])\n    os._exit(0)",
		"time.sleep(100)")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !poll.Wait(clitest.ReadyWithin, func() bool { return len(leakcheck.WithArg(marker)) >= 5 }) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%d of 5 sleepers started", len(leakcheck.WithArg(marker)))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	clitest.GoneWithin(t, 10*time.Second, marker, "their host")
}

func TestContinues(t *testing.T) {
	for _, c := range []struct {
		code string
		want bool
	}{
		{"x = 1", false},
		{"def f():", true},
		{"def f():\n    return 1", true},
		{"for i in range(3):  # loop", true},
		{"print(1,", true},
		{"print(1,\n2)", false},
		{`s = """abc`, true},
		{"s = \"\"\"abc\n\"\"\"", false},
		{`x = "a:"`, false},
		{"x = 1 + \\", true},
		{"d = {'a': 1}", false},
		{"# just a comment (", false},
	} {
		if got := continues(c.code); got != c.want {
			t.Errorf("continues(%q) = %v; want %v", c.code, got, c.want)
		}
	}
}

func TestExitStatuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"exec", "1 + 1"}, exitOK},
		{[]string{"exec", "1 + 1", "raise ValueError('no')"}, exitFail},
		{[]string{"exec", "--timeout", "banana", "1"}, exitUsage},
		{[]string{"exec", "--timeout", "-1s", "1"}, exitUsage},
		{[]string{"exec", "--bogus"}, exitUsage},
		{[]string{"repl", "extra"}, exitUsage},
		{[]string{"bogus"}, exitUsage},
		{[]string{"send", "--session", "s", strings.Repeat("x", admin.MaxSendText+1)}, exitUsage},
		{[]string{"send", "--session", "s", ""}, exitUsage},
		{[]string{"send", "--session", "s", "\xff"}, exitUsage},
	} {
		var out, errs strings.Builder
		if got := run(t.Context(), c.args, strings.NewReader(""), &out, &errs); got != c.want {
			t.Errorf("kiln %q: exit %d; want %d (stderr %q)", c.args, got, c.want, errs.String())
		}
	}
}

// TestLogReadsARecordItCannotWrite reads a record whose directory and files allow no
// write: kiln log needs none. The reader runs in a user namespace of its own, mapping no
// one, where even the superuser has only the permission bits of the files' owner.
func TestLogReadsARecordItCannotWrite(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	var out, errs strings.Builder
	if code := run(t.Context(), []string{"exec", "--data", data, "--session", "s", "1 + 1"}, strings.NewReader(""), &out, &errs); code != exitOK {
		t.Fatalf("exec: exit %d: %s", code, errs.String())
	}
	before := tree(t, data)
	chmodTree(t, data, 0o555, 0o444)
	t.Cleanup(func() { chmodTree(t, data, 0o700, 0o600) })
	cmd := clitest.Command(t, "log", "--data", data, "--session", "s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	got, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
		t.Skipf("no user namespace: %v", err)
	}
	if err != nil {
		t.Fatalf("kiln log: %v\n%s", err, got)
	}
	if !strings.Contains(string(got), "session created") || !strings.Contains(string(got), "c-1 g-1 ended ok") {
		t.Errorf("kiln log printed:\n%s", got)
	}
	if after := tree(t, data); !slices.Equal(before, after) {
		t.Errorf("the data directory changed: %q, then %q", before, after)
	}
}

// tree lists the files under dir with their sizes and modification times.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %s", path, info.Size(), info.ModTime()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chmodTree sets the mode of every directory under dir, dir too, to dirs and of every
// file to files.
func chmodTree(t *testing.T, dir string, dirs, files os.FileMode) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(path, dirs)
		}
		return os.Chmod(path, files)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostProcs checks which commands run with one runtime thread: those whose host
// serves one worker or program, unless the environment sets GOMAXPROCS.
func TestHostProcs(t *testing.T) {
	for _, c := range []struct {
		args   []string
		envSet bool
		want   int
	}{
		{[]string{"exec", "1 + 1"}, false, 1},
		{[]string{"exec", "--json", "1 + 1"}, false, 1},
		{[]string{"--json", "exec", "1 + 1"}, false, 1},
		{[]string{"repl"}, false, 1},
		{[]string{"run", "prog.py"}, false, 1},
		{[]string{"exec", "1 + 1"}, true, 0},
		{[]string{"serve"}, false, 0},
		{[]string{"mcp"}, false, 0},
		{[]string{"log"}, false, 0},
		{[]string{}, false, 0},
		{[]string{"bogus"}, false, 0},
	} {
		if got := hostProcs(c.args, c.envSet); got != c.want {
			t.Errorf("hostProcs(%q, %v) = %d; want %d", c.args, c.envSet, got, c.want)
		}
	}
}
