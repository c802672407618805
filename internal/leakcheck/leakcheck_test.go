package leakcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// shortGrace keeps the runs that must fail short.
const shortGrace = 200 * time.Millisecond

// runner is a test run that leaves what its function leaves.
type runner func() int

func (r runner) Run() int { return r() }

func TestAGoroutineLeftBehindFailsTheRun(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	stop := make(chan struct{})
	defer close(stop)
	code := run(runner(func() int {
		go func() { <-stop }()
		return 0
	}), shortGrace)
	if code != 1 {
		t.Errorf("Run = %d; want 1", code)
	}
}

func TestAProcessLeftBehindFailsTheRun(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	cmd := exec.Command("sleep", "60")
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	code := run(runner(func() int {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return 0
	}), shortGrace)
	if code != 1 {
		t.Errorf("Run = %d; want 1", code)
	}
	if pids := WithArg("60"); len(pids) == 0 || !Alive(cmd.Process.Pid) {
		t.Errorf("WithArg(60) = %v; the sleeper %d is alive: %v", pids, cmd.Process.Pid, Alive(cmd.Process.Pid))
	}
}

func TestATemporaryFileLeftBehindFailsTheRun(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	var made string
	code := run(runner(func() int {
		dir, err := os.MkdirTemp("", "kiln-worker-p"+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			t.Fatal(err)
		}
		made = dir
		return 0
	}), shortGrace)
	os.RemoveAll(made)
	if code != 1 {
		t.Errorf("Run = %d; want 1", code)
	}
}

func TestWrapChecksTheRunItWraps(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	stop := make(chan struct{})
	defer close(stop)
	leaky := runner(func() int {
		go func() { <-stop }()
		return 0
	})
	if code := Wrap(leaky).Run(); code != 1 {
		t.Errorf("Wrap(leaky).Run() = %d; want 1", code)
	}
}

func TestANestedRunIsLeftToTheOuterOne(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	// This test binary's own run is checked: a run inside it is a helper's.
	if code := run(runner(func() int { go func() { <-stop }(); return 0 }), shortGrace); code != 0 {
		t.Errorf("nested run = %d; want 0", code)
	}
}

func TestWhatEndsInTimePasses(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	code := run(runner(func() int {
		done := make(chan struct{})
		go func() { close(done) }()
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		f, err := os.CreateTemp("", "gone-p"+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		os.Remove(f.Name())
		<-done
		return 0
	}), shortGrace)
	if code != 0 {
		t.Errorf("Run = %d; want 0", code)
	}
}

func TestAFailedRunKeepsItsCode(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	if code := run(runner(func() int { return 3 }), shortGrace); code != 3 {
		t.Errorf("Run = %d; want 3", code)
	}
}

func TestSignature(t *testing.T) {
	for _, c := range []struct{ stack, want string }{
		{"goroutine 7 [chan receive]:\nmain.wait(0xc000)\n\t/x/main.go:9 +0x1\ncreated by main.start in goroutine 1\n\t/x/main.go:5 +0x2",
			"main.wait (created by main.start)"},
		{"goroutine 1 [running]:\nmain.main()\n\t/x/main.go:3", ""},
		{"goroutine 5 [select]:\ntesting.(*T).Run(0x1)\n\t/go/testing.go:1\ncreated by testing.runTests in goroutine 1\n\t/go/testing.go:2", ""},
	} {
		if got := signature(c.stack); got != c.want {
			t.Errorf("signature(%q) = %q; want %q", strings.SplitN(c.stack, "\n", 2)[1], got, c.want)
		}
	}
}

func TestAnyFileLeftInAnIsolatedRunFailsIt(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	outer := os.TempDir()
	var made, isolated string
	code := RunIsolated(runner(func() int {
		isolated = os.TempDir()
		f, err := os.CreateTemp("", "no-pid-")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		made = f.Name()
		return 0
	}))
	if code != 1 || filepath.Dir(made) != isolated || isolated == outer {
		t.Errorf("RunIsolated = %d, the file %s in %s (outside: %s); want 1, in a directory of its own", code, made, isolated, outer)
	}
	if _, err := os.Stat(isolated); !os.IsNotExist(err) || os.TempDir() != outer {
		t.Errorf("after the run: %s %v, TMPDIR %s; want it removed and TMPDIR back", isolated, err, os.TempDir())
	}
}

func TestAnIsolatedRunThatLeavesNothingPasses(t *testing.T) {
	t.Setenv(nested, "") // a run of its own, not nested in this binary's
	code := RunIsolated(runner(func() int {
		dir, err := os.MkdirTemp("", "gone-")
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(dir)
		return 0
	}))
	if code != 0 {
		t.Errorf("RunIsolated = %d; want 0", code)
	}
}
