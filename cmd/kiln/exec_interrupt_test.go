package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestExecCtrlCInterruptsTheRunningCellAndTheNextRun(t *testing.T) {
	cmd := kilnCommand(t, "exec", "--data", t.TempDir(),
		"import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.01)", "6 * 7")
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewReader(stdout)
	expectLine(t, lines, "looping")
	cmd.Process.Signal(os.Interrupt)
	expectLine(t, lines, "42")
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exec ended with %v, want exit status 1 (a cell was interrupted); stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "KeyboardInterrupt") {
		t.Errorf("stderr does not show the interrupt:\n%s", stderr.String())
	}
}
