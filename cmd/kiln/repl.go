package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/kilnrt/kiln"
	"github.com/spf13/cobra"
)

func newRepl() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Annotations: oneThread,
		Use:         "repl",
		Short:       "An interactive Python workbench",
		Long: `Start an interactive workbench: type Python, see its output. A statement that
opens a block (a line ending in ':'), or an unclosed bracket or string, continues on the
next lines until an empty line ends it.

Ctrl-C interrupts the running cell (or discards the line being typed, or abandons a
Tab completion under way), never the repl; Ctrl-D exits (typed while a cell runs, at the prompt after it). SIGTERM or SIGHUP while a cell runs interrupts it, records it so, and
ends the repl. Everything is recorded in the durable record of --data, as for kiln exec.

On a terminal (stdin and stdout both), lines are edited as in a shell: arrows, Ctrl-R to search the history
(kept in <data>/repl_history), Tab to complete names from the live namespace, and a
pasted block, blank lines and all, runs as one cell. input() in a cell asks on the
terminal, or takes the next line of a piped input. A line over 1 MiB is refused, said
so, and the repl goes on.

With --json each cell's record is printed when it ends, one JSON object a line, as
kiln exec --json prints it, and stdout has nothing else: lines are read as typed,
without the line editor, and prompts, input()'s included, go to stderr.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := flags.workbenchOptions()
			if err != nil {
				return err
			}
			return repl(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts, asJSON)
		},
	}
	flags.addRun(cmd)
	addJSON(cmd, &asJSON, "print each cell's record as one JSON object, as kiln exec --json does")
	return cmd
}

// repl reads cells from in until it ends, running each in one workbench; asJSON prints
// their records as JSON.
func repl(ctx context.Context, in io.Reader, stdout, stderr io.Writer, opts kiln.WorkbenchOptions, asJSON bool) error {
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)

	opts.OnSpeech = speechPrinter(stderr)
	opts.Python = spareWrapper(ctx, stderr, opts.Python, asJSON)
	if editorServes(in, stdout, asJSON) {
		ahead := new(typeAhead)
		opts.OnInput = editorAnswerer(ahead)
		wb, err := kiln.OpenWorkbench(ctx, opts)
		if err != nil {
			return err
		}
		defer wb.Close()
		return interactive(ctx, wb, opts.DataDir, ahead, interrupts, stdout, stderr)
	}
	lines := make(chan line)
	go readLines(in, lines)
	prompts := stdout
	if asJSON {
		prompts = stderr
	}
	opts.OnInput = lineAnswerer(prompts, stderr, lines)
	wb, err := kiln.OpenWorkbench(ctx, opts)
	if err != nil {
		return err
	}
	defer wb.Close()

	var cell []string
	prompt := func() {
		if len(cell) == 0 {
			io.WriteString(stderr, ">>> ")
		} else {
			io.WriteString(stderr, "... ")
		}
	}
	prompt()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-interrupts:
			cell = nil
			io.WriteString(stderr, "\nKeyboardInterrupt\n")
			prompt()
		case l, ok := <-lines:
			if !ok {
				io.WriteString(stderr, "\n")
				return nil
			}
			if l.tooLong > 0 {
				io.WriteString(stderr, l.refusal())
				cell = nil
				prompt()
				continue
			}
			line := l.text
			cell = append(cell, line)
			code := strings.Join(cell, "\n")
			if continues(code) && line != "" {
				prompt()
				continue
			}
			cell = nil
			if strings.TrimSpace(code) != "" {
				if err := replCell(ctx, wb, code, interrupts, stdout, stderr, asJSON); err != nil {
					return err
				}
			}
			prompt()
		}
	}
}

// replCell runs one cell, turning a Ctrl-C into its interrupt, and shows it, or with
// asJSON prints its record.
func replCell(ctx context.Context, wb *kiln.Workbench, code string, interrupts <-chan os.Signal, stdout, stderr io.Writer, asJSON bool) error {
	// SIGTERM and SIGHUP are caught while the cell runs only: it is interrupted and
	// recorded before the repl ends. At the prompt they end the repl as they always do.
	ctx, stop := terminable(ctx)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		select {
		case <-interrupts:
			cancel()
		case <-done:
		}
	}()
	var onOutput func(string, kiln.Output)
	shown := &humanOutput{stdout: stdout, stderr: stderr, images: workbenchImages(wb)}
	if !asJSON {
		onOutput = shown.show
	}
	rec, err := wb.ExecuteStream(ctx, code, onOutput)
	close(done)
	if err != nil {
		return fmt.Errorf("running cell: %w", err)
	}
	if asJSON {
		err = printJSON(stdout, rec)
	} else {
		renderRecord(stdout, stderr, rec, shown)
	}
	if cause := context.Cause(ctx); errors.Is(cause, errTerminated) && err == nil {
		err = cause
	}
	return err
}

// continues reports whether code is an unfinished compound statement or has an open
// bracket, string or line continuation, so the repl should read another line.
func continues(code string) bool {
	depth := 0
	var quote string // the open string's delimiter, "" outside strings
	for i := 0; i < len(code); i++ {
		c := code[i]
		if quote != "" {
			switch {
			case c == '\\':
				i++
			case strings.HasPrefix(code[i:], quote):
				i += len(quote) - 1
				quote = ""
			case c == '\n' && len(quote) == 1:
				quote = "" // an unterminated short string is Python's error to report
			}
			continue
		}
		switch c {
		case '#':
			for i < len(code) && code[i] != '\n' {
				i++
			}
		case '"', '\'':
			quote = string(c)
			if strings.HasPrefix(code[i:], strings.Repeat(quote, 3)) {
				quote = strings.Repeat(quote, 3)
				i += 2
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		}
	}
	if quote != "" || depth > 0 {
		return true
	}
	trimmed := strings.TrimRight(code, " \t")
	if strings.HasSuffix(trimmed, "\\") {
		return true
	}
	lines := strings.Split(code, "\n")
	// A block stays open while its lines come: it was opened by a line ending in ':'
	// (ignoring a trailing comment), and ends at the empty line that follows.
	for _, l := range lines {
		if strings.HasSuffix(strings.TrimSpace(stripComment(l)), ":") {
			return true
		}
	}
	return false
}

// stripComment drops a trailing # comment from a line that has no string in it.
func stripComment(line string) string {
	if strings.ContainsAny(line, `"'`) {
		return line
	}
	if i := strings.IndexByte(line, '#'); i >= 0 {
		return line[:i]
	}
	return line
}
