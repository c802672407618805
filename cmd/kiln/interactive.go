package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/kilnrt/kiln"
	"github.com/reeflective/readline"
	"golang.org/x/sys/unix"
)

// historyFile is the repl's line history, under the data directory.
const historyFile = "repl_history"

// isTerminal reports whether f is a terminal: it has terminal attributes, which a
// character device such as /dev/null has not.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// editorServes reports whether the line editor can read a repl's lines from in and show
// them beside its output on stdout. The editor reads the process's stdin and writes its
// prompts and control sequences to the process's stdout, so both must be those, and
// terminals. Under --json stdout carries JSON alone, which the editor's writes would
// corrupt: lines are read as they come, prompts on stderr.
func editorServes(in io.Reader, stdout io.Writer, asJSON bool) bool {
	return !asJSON && in == io.Reader(os.Stdin) && stdout == io.Writer(os.Stdout) &&
		isTerminal(os.Stdin) && isTerminal(os.Stdout)
}

// newShell is a line editor that does not ask the terminal where its cursor is: a
// terminal that does not answer would hold the editor forever. Lines start at the left
// edge, after output that ends its line.
func newShell() *readline.Shell {
	rl := readline.NewShell()
	rl.Config.Set("cursor-position-probe", false)
	return rl
}

// newEditor returns the line editor of an interactive repl: Python's prompts, a block
// read until it is complete, a history kept in dataDir, bracketed paste (a pasted block
// is one cell, blank lines and all), and Tab completion from wb's live namespace, which
// a Ctrl-C (one of interrupts) abandons.
func newEditor(ctx context.Context, wb *kiln.Workbench, dataDir string, interrupts <-chan os.Signal) *readline.Shell {
	rl := newShell()
	rl.Config.Set("enable-bracketed-paste", true)
	rl.Prompt.Primary(func() string { return ">>> " })
	rl.Prompt.Secondary(func() string { return "... " })
	if dataDir != "" {
		rl.History.Delete()
		rl.History.AddFromFile("kiln", filepath.Join(dataDir, historyFile))
	}
	rl.AcceptMultiline = func(line []rune) bool {
		code := string(line)
		return !continues(code) || strings.HasSuffix(code, "\n")
	}
	rl.Completer = func(line []rune, cursor int) readline.Completions {
		head, token := completionToken(string(line[:cursor]))
		if token == "" {
			return readline.Completions{}
		}
		cctx, stop := interruptible(ctx, interrupts)
		matches, err := wb.Complete(cctx, token)
		interrupted := stop()
		switch {
		case interrupted:
			return readline.CompleteMessage("completion interrupted")
		case err != nil:
			return readline.CompleteMessage("%v", err)
		}
		for i, m := range matches {
			matches[i] = head + m
		}
		return readline.CompleteValues(matches...)
	}
	return rl
}

// keepKeys takes the terminal out of canonical mode until the returned restore: the
// line editor switches to raw mode only while it reads, and a Ctrl-D typed between its
// reads, while a cell runs, is then kept for it as a key rather than turned into a
// canonical end of file, which raw mode reads as a NUL. Ctrl-C still sends SIGINT.
func keepKeys(fd int) (restore func()) {
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}
	}
	keys := *saved
	keys.Lflag &^= unix.ICANON
	keys.Cc[unix.VMIN], keys.Cc[unix.VTIME] = 1, 0
	if unix.IoctlSetTermios(fd, unix.TCSETS, &keys) != nil {
		return func() {}
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, saved) }
}

// interruptible returns a context that a Ctrl-C typed on the terminal cancels, while the
// line editor, which reads Ctrl-C as a key, is waiting on a completion and reads none:
// the terminal sends SIGINT for Ctrl-C until stop, which says whether one came.
func interruptible(ctx context.Context, interrupts <-chan os.Signal) (_ context.Context, stop func() bool) {
	for len(interrupts) > 0 { // one that came before
		<-interrupts
	}
	fd := int(os.Stdin.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return ctx, func() bool { return false }
	}
	if saved.Lflag&unix.ISIG == 0 {
		signals := *saved
		signals.Lflag |= unix.ISIG
		unix.IoctlSetTermios(fd, unix.TCSETS, &signals)
	}
	cctx, cancel := context.WithCancel(ctx)
	var interrupted atomic.Bool
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-interrupts:
			interrupted.Store(true)
			cancel()
		case <-done:
		}
	}()
	return cctx, func() bool {
		unix.IoctlSetTermios(fd, unix.TCSETS, saved)
		close(done)
		<-watched
		cancel()
		return interrupted.Load()
	}
}

// completionToken splits the text before the cursor into the editor's word up to the
// Python name being typed (dotted), and that name.
func completionToken(before string) (head, token string) {
	word := before[strings.LastIndexFunc(before, unicode.IsSpace)+1:]
	start := len(word)
	for start > 0 {
		r := rune(word[start-1])
		if r != '.' && r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			break
		}
		start--
	}
	return word[:start], word[start:]
}

// interactive runs the repl on a terminal through the line editor.
func interactive(ctx context.Context, wb *kiln.Workbench, dataDir string, ahead *typeAhead, interrupts <-chan os.Signal, stdout, stderr io.Writer) error {
	fmt.Fprintf(stderr, "kiln repl: session %s, generation %s. Ctrl-C interrupts, Ctrl-D exits.\n", wb.Session(), wb.Generation())
	rl := newEditor(ctx, wb, dataDir, interrupts)
	defer keepKeys(int(os.Stdin.Fd()))()
	for {
		code, err := ahead.readline(rl)
		switch {
		case errors.Is(err, readline.ErrInterrupt):
			io.WriteString(stderr, "KeyboardInterrupt\n")
			continue
		case errors.Is(err, io.EOF):
			io.WriteString(stderr, "\n")
			return nil
		case err != nil:
			return fmt.Errorf("reading the terminal: %w", err)
		}
		if strings.TrimSpace(code) == "" {
			continue
		}
		for len(interrupts) > 0 { // a Ctrl-C that came while the line was typed
			<-interrupts
		}
		if err := replCell(ctx, wb, code, interrupts, stdout, stderr, false); err != nil {
			return err
		}
	}
}

// editorAnswerer answers a cell's input() on the terminal through a line editor of its
// own, showing the prompt, which takes the keys typed ahead of it from ahead. Ctrl-C at
// the prompt raises KeyboardInterrupt from the cell's input(), as Python's own input()
// does; Ctrl-D, EOFError.
func editorAnswerer(ahead *typeAhead) func(context.Context, string, string) (string, error) {
	rl := newShell()
	return func(ctx context.Context, _, prompt string) (string, error) {
		rl.Prompt.Primary(func() string { return prompt })
		line, err := ahead.readline(rl)
		if errors.Is(err, readline.ErrInterrupt) {
			return "", kiln.ErrInputInterrupted
		}
		return line, err
	}
}

// typeAhead carries the keys a line editor read past the line it returned to the next
// editor that reads: the repl's and the one that answers input() read one terminal, and
// a key typed ahead, in the same read as the Enter before it (a Ctrl-D that ends an
// input() or the repl), belongs to whichever reads next.
type typeAhead struct {
	mu   sync.Mutex
	keys []byte
}

// readline reads a line with rl, the keys typed ahead first, and keeps those rl read
// past it.
func (t *typeAhead) readline(rl *readline.Shell) (string, error) {
	t.mu.Lock()
	keys := t.keys
	t.keys = nil
	t.mu.Unlock()
	if len(keys) > 0 {
		rl.Keys.Feed(false, []rune(string(keys))...)
	}
	line, err := rl.Readline()
	var left []byte
	for {
		k, empty := rl.Keys.Pop()
		if empty {
			break
		}
		left = append(left, k)
	}
	t.mu.Lock()
	t.keys = append(t.keys, left...)
	t.mu.Unlock()
	return line, err
}
