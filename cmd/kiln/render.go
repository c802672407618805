package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kilnrt/kiln"
)

// outputPrinter shows a cell's stdout, stderr and displays to a person as they come;
// images go to files under images (showDisplay).
func outputPrinter(stdout, stderr io.Writer, images string) func(string, kiln.Output) {
	return func(id string, o kiln.Output) {
		if o.Stream == "display" {
			showDisplay(stdout, stderr, images, id, o)
			return
		}
		if o.Stream == "stderr" {
			io.WriteString(stderr, o.Text)
			return
		}
		io.WriteString(stdout, o.Text)
	}
}

// outputEvent is a piece of output as kiln exec --json --stream prints it.
type outputEvent struct {
	Event  string            `json:"event"` // "output"
	ID     string            `json:"id"`
	Stream string            `json:"stream"`
	Text   string            `json:"text,omitempty"`
	Data   map[string]string `json:"data,omitempty"` // a display's MIME bundle
}

// outputEvents prints each piece of output as a JSON line as it comes.
func outputEvents(w io.Writer) func(string, kiln.Output) {
	return func(id string, o kiln.Output) {
		printJSON(w, outputEvent{"output", id, o.Stream, o.Text, o.Data})
	}
}

// renderRecord shows a cell's record to a person, after outputPrinter showed its stdout
// and stderr: its raw output's tails, result records on stdout, the error on stderr, and
// what kiln did to the cell said plainly.
func renderRecord(stdout, stderr io.Writer, rec kiln.Record) {
	renderRaw(stdout, "stdout", rec.RawStdout)
	renderRaw(stderr, "stderr", rec.RawStderr)
	for i, o := range rec.Output {
		if o.Stream == "result" && !shownAsDisplay(rec.Output[:i], o.Text) {
			io.WriteString(stdout, o.Text)
			io.WriteString(stdout, "\n")
		}
	}
	if rec.TruncatedBytes > 0 {
		fmt.Fprintf(stderr, "[kiln] %d more bytes of output were discarded (a cell returns at most 65536)\n", rec.TruncatedBytes)
	}
	switch rec.Status {
	case kiln.StatusOK:
	case kiln.StatusYielded:
		fmt.Fprintf(stderr, "[kiln] cell %s yielded: it ended its turn waiting for input\n", rec.ID)
	default:
		if rec.Error != nil {
			text := *rec.Error
			io.WriteString(stderr, text)
			if !strings.HasSuffix(text, "\n") {
				io.WriteString(stderr, "\n")
			}
		}
		if rec.Status != kiln.StatusError {
			fmt.Fprintf(stderr, "[kiln] cell %s %s\n", rec.ID, rec.Status)
		}
	}
	if rec.NamespaceLostReason != "" {
		fmt.Fprintf(stderr, "[kiln] cell %s: %s\n", rec.ID, rec.NamespaceLostReason)
	} else if rec.NamespaceLost {
		fmt.Fprintf(stderr, "[kiln] generation %s ended: its namespace is lost; the next cell starts a new one\n", rec.Generation)
	}
}

// shownAsDisplay says whether a result of text was already shown: a final value with a
// rich representation is recorded as its display, then its result, and showDisplay
// printed the display's text/plain when it had no image to name.
func shownAsDisplay(before []kiln.Output, text string) bool {
	if len(before) == 0 {
		return false
	}
	last := before[len(before)-1]
	if last.Stream != "display" || last.Data["text/plain"] != text {
		return false
	}
	for _, t := range imageTypes {
		if _, ok := last.Data[t.mime]; ok {
			return false
		}
	}
	return true
}

// renderRaw shows a raw output tail as it was written, saying what was not kept.
func renderRaw(w io.Writer, stream string, tail *kiln.RawTail) {
	if tail == nil {
		return
	}
	if tail.DroppedBytes > 0 {
		fmt.Fprintf(w, "[kiln] raw %s: %d earlier bytes not kept\n", stream, tail.DroppedBytes)
	}
	io.WriteString(w, tail.Text)
}

// speechPrinter prints the agent's local.send speech as it is recorded: a confirmed send
// as what the agent said, a held one with why it was held.
func speechPrinter(w io.Writer) func(kiln.Speech) {
	return func(s kiln.Speech) {
		if s.Status == "confirmed" {
			fmt.Fprintf(w, "agent: %s\n", s.Text)
			return
		}
		fmt.Fprintf(w, "[kiln] the agent's message was held (%s): %s\n", s.Reason, s.Text)
	}
}
