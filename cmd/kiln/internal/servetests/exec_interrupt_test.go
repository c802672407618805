package servetests

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

func TestExecCtrlCInterruptsTheRunningCellAndTheNextRun(t *testing.T) {
	cmd := clitest.Command(t, "exec", "--data", t.TempDir(),
		"import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.01)", "6 * 7")
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewReader(stdout)
	clitest.ExpectLine(t, lines, "looping")
	cmd.Process.Signal(os.Interrupt)
	clitest.ExpectLine(t, lines, "42")
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exec ended with %v, want exit status 1 (a cell was interrupted); stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "KeyboardInterrupt") {
		t.Errorf("stderr does not show the interrupt:\n%s", stderr.String())
	}
}

// TestExecCtrlCInterruptsTheDaemonsCell checks that a Ctrl-C of kiln exec --json, whose
// cell runs in a daemon's session, interrupts the cell in the daemon: its record there
// ends interrupted, and the session's next cell runs.
func TestExecCtrlCInterruptsTheDaemonsCell(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"S"}`, 201, nil)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://kiln/v1/sessions/S/events?after=0", nil)
	resp, err := s.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	cmd := clitest.Command(t, "exec", "--json", "--data", dir, "--session", "S",
		"import time\nprint('ready', flush=True)\ntime.sleep(100)")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	events := bufio.NewScanner(resp.Body)
	for !strings.Contains(events.Text(), `"kind":"output"`) || !strings.Contains(events.Text(), "ready") {
		if !events.Scan() {
			t.Fatalf("the event stream ended before the cell's output: %v", events.Err())
		}
	}
	cmd.Process.Signal(os.Interrupt)
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exec ended with %v, want exit status 1 (its cell was interrupted); stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"status":"interrupted"`) {
		t.Errorf("exec printed %s; want the record of an interrupted cell", stdout.String())
	}
	var rec clitest.ExecRecord
	s.Call("GET", "/v1/executions/S:c-1", "", 200, &rec)
	if rec.Status != "interrupted" {
		t.Fatalf("the daemon's record of the cell: %+v; want it interrupted", rec)
	}
	if out := clitest.Out(t, "exec", "--data", dir, "--session", "S", "6 * 7"); out != "42\n" {
		t.Fatalf("the next cell printed %q; want 42", out)
	}
}

// TestTerminationRecordsTheRunningCell: SIGTERM or SIGHUP of kiln exec, or of kiln repl
// while a cell runs, interrupts the cell, records it so, runs no later cell, and ends the
// command with status 1. No cell is left running in the record.
func TestTerminationRecordsTheRunningCell(t *testing.T) {
	t.Parallel()
	const sleeper = "import time\nprint('ready', flush=True)\ntime.sleep(60)"
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		args []string
		in   string
	}{
		{"exec SIGTERM", syscall.SIGTERM, []string{"exec", sleeper, "print('after')"}, ""},
		{"exec SIGHUP", syscall.SIGHUP, []string{"exec", sleeper, "print('after')"}, ""},
		{"repl SIGTERM", syscall.SIGTERM, []string{"repl"}, strings.ReplaceAll(sleeper, "\n", "; ") + "\nprint('after')\n"},
		{"repl SIGHUP", syscall.SIGHUP, []string{"repl"}, strings.ReplaceAll(sleeper, "\n", "; ") + "\nprint('after')\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			cmd := clitest.Command(t, append(tc.args[:1:1], append([]string{"--data", data, "--session", "s"}, tc.args[1:]...)...)...)
			stdout, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if tc.in != "" {
				in, _ := cmd.StdinPipe()
				defer in.Close() // open while the repl runs: it ends by the signal, not by EOF
				io.WriteString(in, tc.in)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			lines := bufio.NewReader(stdout)
			clitest.ExpectLine(t, lines, "ready")
			cmd.Process.Signal(tc.sig)
			rest, _ := io.ReadAll(lines)
			var exit *exec.ExitError
			if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("ended with %v; want exit status 1; stderr:\n%s", err, stderr.String())
			}
			if strings.Contains(string(rest), "after") {
				t.Errorf("a cell after the signal ran: stdout %q", rest)
			}
			ends := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(clitest.Out(t, "log", "--json", "--data", data, "--session", "s")), "\n") {
				var e struct {
					Kind   string         `json:"kind"`
					Record map[string]any `json:"record"`
				}
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				if id, _ := e.Record["id"].(string); e.Kind == "execution" || e.Kind == "execution.end" {
					status, _ := e.Record["status"].(string)
					ends[id] = status
				}
			}
			if len(ends) != 1 || ends["c-1"] != "interrupted" {
				t.Errorf("the record: %v; want c-1 interrupted and no other cell", ends)
			}
		})
	}
}
