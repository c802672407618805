package repltests

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// jsonRecord is what these tests read of a cell record printed under --json.
type jsonRecord struct {
	Session string `json:"session"`
	Status  string `json:"status"`
	Output  []struct {
		Text string `json:"text"`
	} `json:"output"`
}

// readRecord reads the next line of r, which must be a cell record and nothing else.
func readRecord(t *testing.T, r *bufio.Reader) jsonRecord {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		done <- line
	}()
	var line string
	select {
	case line = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("no record within 20s")
	}
	return parseRecord(t, line)
}

// parseRecord parses line, a cell record, failing the test unless it is JSON alone.
func parseRecord(t *testing.T, line string) jsonRecord {
	t.Helper()
	var rec jsonRecord
	if err := json.Unmarshal([]byte(line), &rec, json.RejectUnknownMembers(false)); err != nil || rec.Session == "" {
		t.Fatalf("stdout line %q is not a cell record: %v", line, err)
	}
	return rec
}

// text is the text of rec's one piece of output, "" when it has none.
func (rec jsonRecord) text() string {
	if len(rec.Output) != 1 {
		return ""
	}
	return rec.Output[0].Text
}

// TestReplJSONOnATerminalWritesJSONOnly checks that kiln repl --json, its stdin a
// terminal, writes nothing but cell records on stdout: no prompt and no control
// sequence of a line editor, whether stdout is a pipe or the terminal too.
func TestReplJSONOnATerminalWritesJSONOnly(t *testing.T) {
	t.Parallel()
	t.Run("stdout a pipe", func(t *testing.T) {
		cmd := clitest.Command(t, "repl", "--json", "--data", t.TempDir())
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		term := startOnTerminal(t, cmd)
		lines := bufio.NewReader(stdout)
		term.expect(">>> ") // prompts are on the terminal, stderr
		term.send("1 + 1\r")
		if rec := readRecord(t, lines); rec.text() != "2" {
			t.Fatalf("the first cell: %+v", rec)
		}
		term.send("x = input('name? ')\r")
		term.expect("name? ")
		term.send("Maya\r")
		if rec := readRecord(t, lines); rec.Status != "ok" {
			t.Fatalf("the input() cell: %+v", rec)
		}
		term.send("x\r")
		if rec := readRecord(t, lines); rec.text() != "'Maya'" {
			t.Fatalf("the answer: %+v", rec)
		}
		term.send("\x04")
		term.waitExit()
		if rest, _ := io.ReadAll(lines); len(rest) != 0 {
			t.Errorf("stdout after the records: %q", rest)
		}
	})

	t.Run("stdout the terminal", func(t *testing.T) {
		cmd := clitest.Command(t, "repl", "--json", "--data", t.TempDir())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		term := startOnTerminal(t, cmd)
		typed := []string{"1 + 1", "x = input('name? ')", "Maya", "x"}
		term.send(typed[0] + "\r")
		term.expect(`"text":"2"`)
		term.send(typed[1] + "\r" + typed[2] + "\r" + typed[3] + "\r")
		term.expect(`"text":"'Maya'"`)
		term.send("\x04")
		term.waitExit()
		term.mu.Lock()
		out := term.out.String()
		term.mu.Unlock()
		if strings.ContainsRune(out, '\x1b') || strings.Contains(out, ">>>") {
			t.Fatalf("the terminal shows what is not JSON: %q", out)
		}
		records := 0
		for _, line := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
			if line == "" || slices.Contains(typed, line) { // the terminal's echo of a line typed
				continue
			}
			parseRecord(t, line)
			records++
		}
		if records != 3 {
			t.Errorf("%d records on the terminal; want 3:\n%s", records, out)
		}
		if !strings.Contains(stderr.String(), "name? ") {
			t.Errorf("stderr %q lacks input()'s prompt", stderr.String())
		}
	})
}

// TestExecJSONAsksInputOnStderr checks that input() in kiln exec --json, its stdin a
// terminal, asks on stderr: stdout has the records alone.
func TestExecJSONAsksInputOnStderr(t *testing.T) {
	t.Parallel()
	cmd := clitest.Command(t, "exec", "--json", "--data", t.TempDir(), "name = input('name? ')", "name")
	var stdout strings.Builder
	cmd.Stdout = &stdout
	term := startOnTerminal(t, cmd)
	term.expect("name? ")
	term.send("Maya\r")
	term.waitExit()
	lines := strings.SplitAfter(stdout.String(), "\n")
	if len(lines) != 3 || lines[2] != "" {
		t.Fatalf("stdout %q; want two records", stdout.String())
	}
	if rec := parseRecord(t, lines[1]); rec.text() != "'Maya'" {
		t.Errorf("the second cell: %+v", rec)
	}
}

// TestReplOnANonTerminalDevice checks that a character device that is no terminal,
// /dev/null, is read as lines: the line editor writes nothing on stdout.
func TestReplOnANonTerminalDevice(t *testing.T) {
	t.Parallel()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cmd := clitest.Command(t, "repl", "--data", t.TempDir())
	var stdout, stderr strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("repl: %v\n%s", err, stderr.String())
	}
	if stdout.String() != "" || !strings.Contains(stderr.String(), ">>> ") {
		t.Errorf("stdout %q, stderr %q; want the prompt on stderr alone", stdout.String(), stderr.String())
	}
}
