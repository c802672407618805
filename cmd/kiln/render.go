package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kilnrt/kiln"
)

// humanOutput shows a cell's stdout, stderr and displays to a person as they come;
// images go to files under images (showDisplay). It remembers the text of a display it
// showed last without an image, so the record's result of the same value is not shown
// twice.
type humanOutput struct {
	stdout, stderr io.Writer
	images         string
	lastPlain      *string // the text/plain shown for the last output, when it was a display
}

// show shows one piece of a cell's output.
func (h *humanOutput) show(id string, o kiln.Output) {
	h.lastPlain = nil
	switch o.Stream {
	case "display":
		if !showDisplay(h.stdout, h.stderr, h.images, id, o) {
			text := o.Data["text/plain"]
			h.lastPlain = &text
		}
	case "stderr":
		io.WriteString(h.stderr, o.Text)
	default:
		io.WriteString(h.stdout, o.Text)
	}
}

// shownAsDisplay says whether a result of text was just shown: a final value with a
// rich representation is recorded as its display, then its result, and show printed
// the display's text/plain when it had no image to name.
func (h *humanOutput) shownAsDisplay(text string) bool {
	return h.lastPlain != nil && *h.lastPlain == text
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

// renderRecord shows a cell's record to a person, after shown showed its stdout, stderr
// and displays: its raw output's tails, result records on stdout, the error on stderr,
// and what kiln did to the cell said plainly.
func renderRecord(stdout, stderr io.Writer, rec kiln.Record, shown *humanOutput) {
	renderRaw(stdout, "stdout", rec.RawStdout)
	renderRaw(stderr, "stderr", rec.RawStderr)
	for _, o := range rec.Output {
		if o.Stream == "result" && !shown.shownAsDisplay(o.Text) {
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
