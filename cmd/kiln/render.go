package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kilnrt/kiln"
)

// renderRecord shows a cell's record to a person: stdout and result records on stdout,
// stderr records and the error on stderr, and what kiln did to the cell said plainly.
func renderRecord(stdout, stderr io.Writer, rec kiln.Record) {
	for _, o := range rec.Output {
		switch o.Stream {
		case "stderr":
			io.WriteString(stderr, o.Text)
		case "result":
			io.WriteString(stdout, o.Text)
			io.WriteString(stdout, "\n")
		default:
			io.WriteString(stdout, o.Text)
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
