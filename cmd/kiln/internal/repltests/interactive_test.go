package repltests

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/poll"
)

// terminal is a kiln repl on a pseudo-terminal, and what it has written so far.
type terminal struct {
	t    *testing.T
	pty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	seen int // how much of out expect has passed
	more chan struct{}
	exit chan error // the repl's exit, once
}

// ansi matches the terminal control sequences the line editor writes.
var ansi = regexp.MustCompile(`\x1b\[[0-9;? ]*[A-Za-z~]|\x1b[=>]|\r`)

func startTerminal(t *testing.T, args ...string) *terminal {
	return startOnTerminal(t, clitest.Command(t, args...))
}

// startOnTerminal starts cmd with a pseudo-terminal as each of its stdin, stdout and
// stderr that it has not set.
func startOnTerminal(t *testing.T, cmd *exec.Cmd) *terminal {
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, pty: f, more: make(chan struct{}, 1), exit: make(chan error, 1)}
	go func() { term.exit <- cmd.Wait() }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			select {
			case term.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-term.exit
		f.Close()
		<-done
	})
	return term
}

// expect waits for want in what the repl writes next, control sequences removed.
func (term *terminal) expect(want string) {
	term.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		term.mu.Lock()
		text := ansi.ReplaceAllString(term.out.String()[term.seen:], "")
		if i := strings.Index(text, want); i >= 0 {
			raw := term.out.String()[term.seen:]
			// Move past the first raw position whose cleaned prefix holds want.
			for j := 1; j <= len(raw); j++ {
				if strings.Contains(ansi.ReplaceAllString(raw[:j], ""), want) {
					term.seen += j
					break
				}
			}
			term.mu.Unlock()
			return
		}
		term.mu.Unlock()
		select {
		case <-term.more:
		case <-deadline:
			term.t.Fatalf("no %q in %q (raw %q)", want, text, term.out.String())
		}
	}
}

func (term *terminal) send(keys string) {
	term.t.Helper()
	if _, err := io.WriteString(term.pty, keys); err != nil {
		term.t.Fatal(err)
	}
}

// waitExit waits for the command on the terminal to exit, and fails the test unless it
// exits 0 (at Ctrl-D, for a repl).
func (term *terminal) waitExit() {
	term.t.Helper()
	select {
	case err := <-term.exit:
		term.exit <- err // for the cleanup
		if err != nil {
			term.t.Fatalf("exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		term.t.Fatal("no exit within 20s")
	}
}

// TestReplLineEditing drives kiln repl through a pseudo-terminal: the banner, arrows and
// history, a pasted block with a blank line run as one cell, Tab completion from the
// live namespace, Ctrl-R, and the history kept in the data directory.
func TestReplLineEditing(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	term := startTerminal(t, "repl", "--data", data, "--session", "tty")
	term.expect("session tty, generation g-1")
	term.expect("\n>>> ")
	term.send("y = 7\r")
	term.expect("\n>>> ")
	term.send("\x1b[A\x7f8\r") // up: "y = 7"; backspace, 8
	term.expect("\n>>> ")
	term.send("y * 2\r")
	term.expect("16")

	term.send("\x1b[200~def f():\r    a = 1\r\r    return a + 1\r\x1b[201~\r")
	term.expect("\n>>> ")
	term.send("f()\r")
	term.expect("2\n")

	term.send("my_long_name = 5\r")
	term.expect("\n>>> ")
	term.send("my_lo\t")
	term.expect("my_long_name")
	term.send(" + 1\r")
	term.expect("6")
	// Ctrl-R typed before the line editor reads again would be the terminal's own
	// (reprint), not the editor's: wait for the prompt.
	term.expect("\n>>> ")

	term.send("\x12y = \r\r") // Ctrl-R "y = ": the latest, y = 8; accept, run
	term.expect("\n>>> ")
	term.send("y\r")
	term.expect("8")
	// Typed before the line editor reads again, the line would be echoed by the
	// terminal, its "name? " matched before input() asks.
	term.expect("\n>>> ")

	term.send("x = input('name? ')\r")
	term.expect("name? ")
	term.send("Maya\r")
	term.expect("\n>>> ")
	term.send("x\r")
	term.expect("'Maya'")

	term.send("\x04")
	term.waitExit()
	history, _ := os.ReadFile(filepath.Join(data, "repl_history")) // as the README says
	if !bytes.Contains(history, []byte("y = 8")) || !bytes.Contains(history, []byte(`def f():\n    a = 1\n\n    return a + 1`)) {
		t.Errorf("history %q lacks the cells", history)
	}
}

// Ctrl-C at an input() prompt raises KeyboardInterrupt from input(), as Python's own
// does: a loop that catches EOFError does not run on, and the namespace is kept.
func TestReplCtrlCAtInputInterruptsTheCell(t *testing.T) {
	t.Parallel()
	term := startTerminal(t, "repl", "--data", t.TempDir(), "--session", "tty")
	term.expect("\n>>> ")
	term.send("eofs = 0\r")
	term.expect("\n>>> ")
	term.send("\x1b[200~while True:\r    try:\r        input('more? ')\r    except EOFError:\r        eofs += 1\r\x1b[201~\r")
	term.expect("more? ")
	term.send("\x03")
	term.expect("KeyboardInterrupt")
	term.expect("\n>>> ")
	term.send("print(f'eofs={eofs}')\r")
	term.expect("eofs=0")
	term.send("\x04")
	term.waitExit()
}

// Ctrl-C during a Tab completion that runs the namespace's own slow code abandons the
// completion at once, with a message, and keeps the generation and its namespace.
func TestReplCtrlCCancelsASlowCompletion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := clitest.Command(t, "repl", "--data", t.TempDir(), "--session", "tty")
	cmd.Dir = dir
	term := startOnTerminal(t, cmd)
	term.expect("\n>>> ")
	term.send("\x1b[200~class Slow:\r    def __dir__(self):\r        import time\r        open('began', 'w').close()\r        time.sleep(3600)\r        return ['never']\r\x1b[201~\r")
	term.expect("\n>>> ")
	term.send("s = Slow(); kept = 41\r")
	term.expect("\n>>> ")
	term.send("s.n\t")
	poll.Until(t, 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "began"))
		return err == nil
	})
	term.send("\x03")
	term.expect("completion interrupted")
	term.send("\x03") // discard the line
	term.expect("\n>>> ")
	term.send("kept + 1\r")
	term.expect("42")
	term.send("\x04")
	term.waitExit()
}

// A Ctrl-D typed while a cell runs is kept for the prompt after it, which it ends, as a
// Ctrl-D typed at the prompt does.
func TestReplCtrlDTypedWhileACellRunsEndsTheRepl(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := clitest.Command(t, "repl", "--data", t.TempDir(), "--session", "tty")
	cmd.Dir = dir
	term := startOnTerminal(t, cmd)
	term.expect("\n>>> ")
	term.send("import os, time\r")
	term.expect("\n>>> ")
	term.send("open('began', 'w').close(); [time.sleep(0.01) for _ in iter(lambda: os.path.exists('go'), True)]\r")
	poll.Until(t, 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "began"))
		return err == nil
	})
	term.send("\x04")
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	term.waitExit()
}

// A Ctrl-D typed at an input() prompt raises EOFError in the cell, each time.
func TestReplCtrlDAtAnInputPromptIsEOFError(t *testing.T) {
	t.Parallel()
	term := startTerminal(t, "repl", "--data", t.TempDir(), "--session", "tty")
	term.expect("\n>>> ")
	term.send("\x1b[200~def ask():\r    try:\r        input('name? ')\r    except EOFError:\r        print('eof' + 'error')\r\x1b[201~\r")
	term.expect("\n>>> ")
	for range 3 {
		term.send("ask()\r")
		term.expect("name? ")
		term.send("\x04")
		term.expect("eoferror")
		term.expect("\n>>> ")
	}
	term.send("\x04")
	term.waitExit()
}

// Keys typed ahead go to whichever editor reads next: a Ctrl-D in the read of the line
// that calls input() answers that input(), and one in the read of an input() answer
// ends the repl at the prompt after the cell.
func TestReplKeysTypedAheadReachTheNextReader(t *testing.T) {
	term := startTerminal(t, "repl", "--data", t.TempDir(), "--session", "tty")
	term.expect("\n>>> ")
	term.send("\x1b[200~def ask():\r    try:\r        return input('name? ')\r    except EOFError:\r        print('eof' + 'error')\r\x1b[201~\r")
	term.expect("\n>>> ")
	term.send("ask()\r\x04")
	term.expect("eoferror")
	term.expect("\n>>> ")
	term.send("print('got', ask())\r")
	term.expect("name? ")
	term.send("bo" + "b\r\x04")
	term.expect("got bob")
	term.waitExit()
}
