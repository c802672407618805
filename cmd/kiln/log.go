package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/journal"
	"github.com/spf13/cobra"
)

// logTextLimit bounds how much of one text a human log line shows; --json shows all.
const logTextLimit = 200

func newLog() *cobra.Command {
	var flags dataFlags
	var asJSON, follow bool
	var since int64
	cmd := &cobra.Command{
		Use:   "log [--session NAME] [--json] [--since SEQ] [--follow]",
		Short: "Print the durable record: sessions, generations, cells, requests, effects, inputs",
		Long: `Print the durable record in the order it was written, one entry per line: each
session's creation, generation starts (kernel resets) and ends, cells started and ended, host
requests and their replies (with how long each took), effects and their receipts, waits,
inputs, and program runs recorded by kiln run --session, started and ended, whose tool
calls are host requests of the run (p-1, …). Each line starts with the entry's sequence
number; --since SEQ prints only later entries, so 'kiln log --since N' continues where
an earlier reading stopped.

Human lines shorten long texts; --json prints each entry whole, one JSON object a line
(a cell's source that is not UTF-8, which the host refused, shows U+FFFD for each bad
sequence; code_sha256 is of its exact bytes). A cell the host refused before it ran ends
"not run", with no running time. A cell's start and end reach what another process
reads within 50 ms of being recorded; a cell whose host was killed within 50 ms of its
start or end shows them only once a kiln that writes (exec, repl, serve) opens the data
directory again and folds what the dead host left.

--follow then prints each new entry as it is recorded, until interrupted: it follows the
event stream of the daemon (kiln serve) that serves the data directory.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since < 0 {
				return usageError{fmt.Errorf("--since must not be negative, got %d", since)}
			}
			var d *client.Daemon
			if follow {
				var err error
				if d, err = flags.daemon(cmd.Context()); err != nil {
					return err
				} else if d == nil {
					return codedError{codeDaemonUnreachable, fmt.Errorf("kiln log --follow follows a daemon, and none serves the data directory: start one with kiln serve")}
				}
				defer d.Close()
			}
			j, err := flags.openJournal(cmd.Context())
			if err != nil {
				return err
			}
			defer j.Close()
			filter := journal.LogFilter{Session: flags.session, Since: since}
			out := cmd.OutOrStdout()
			printNew := func() error { // the entries after filter.Since, which moves on past them
				entries, err := j.Log(cmd.Context(), filter)
				if err != nil {
					return err
				}
				for _, e := range entries {
					filter.Since = e.Seq
					if asJSON {
						if e, err = entryOfLog(e); err == nil {
							err = printJSON(out, e)
						}
						if err != nil {
							return err
						}
						continue
					}
					renderEntry(out, e)
				}
				return nil
			}
			if err := printNew(); err != nil || d == nil {
				return err
			}
			return followLog(cmd.Context(), d, filter.Since, printNew)
		},
	}
	flags.addData(cmd)
	cmd.Flags().StringVar(&flags.session, "session", "", "only the records of session NAME")
	addJSON(cmd, &asJSON, "print one JSON object per entry; a cell's has its record, as kiln exec --json prints it")
	cmd.Flags().Int64Var(&since, "since", 0, "only entries after sequence number SEQ")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "then print new entries as they are recorded, until interrupted (needs kiln serve)")
	return cmd
}

// renderEntry writes one journal entry as a line a person reads.
func renderEntry(w io.Writer, e journal.LogEntry) {
	head := fmt.Sprintf("%d %s %s", e.Seq, stamp(e.At), e.Session)
	var body string
	switch r := e.Record.(type) {
	case journal.LogSession:
		body = "session created"
	case journal.LogGeneration:
		if e.Kind == journal.EntryGenerationEnd && r.EndCause != nil {
			body = fmt.Sprintf("generation %s ended: %s", r.Generation, short(*r.EndCause))
			break
		}
		body = fmt.Sprintf("generation %s %s: %s", r.Generation, r.Status, short(string(r.Loaded)))
		if r.Error != nil {
			body += ": " + short(*r.Error)
		}
	case journal.LogCell:
		if e.Kind == journal.EntryCellStart {
			body = fmt.Sprintf("%s %s started: %s", r.CellID, r.Generation, short(r.Code))
			break
		}
		body = fmt.Sprintf("%s %s ended %s", r.CellID, r.Generation, r.Status)
		if r.NotRun {
			body += ", not run"
		} else if r.EndedAt != nil {
			body += fmt.Sprintf(" after %dms", r.EndedAt.Sub(r.StartedAt).Milliseconds())
		}
		if r.ReportedStatus != nil {
			body += fmt.Sprintf(" (the worker reported %s)", *r.ReportedStatus)
		}
		if r.NamespaceLost {
			body += ", namespace lost"
		}
		if r.Error != nil {
			body += ": " + short(*r.Error)
		}
	case journal.LogInput:
		what := r.Source + " input"
		if r.Source == journal.SourceAgent {
			what = "agent speech on the operator lane"
		}
		body = fmt.Sprintf("%s %s: %s", journal.InputRef(r.ID), what, short(string(r.Payload)))
		if len(r.Attention) > 0 {
			body += " attention " + string(r.Attention)
		}
	case journal.LogRequest:
		ref := journal.RequestRef(r.ID)
		if e.Kind == journal.EntryRequest {
			body = fmt.Sprintf("%s %s/%s %s %s", ref, r.ExecutionID, r.RequestID, r.Method, short(string(r.Body)))
			break
		}
		if r.Reply == nil {
			body = ref + " reply missing"
			break
		}
		ms := r.Reply.RepliedAt.Sub(r.ReceivedAt).Milliseconds()
		if r.Reply.Kind == "ok" {
			body = fmt.Sprintf("%s reply ok after %dms %s", ref, ms, short(string(r.Reply.Value)))
		} else {
			body = fmt.Sprintf("%s reply error after %dms %s: %s", ref, ms, r.Reply.Code, short(r.Reply.Message))
		}
	case journal.LogEffect:
		if e.Kind == journal.EntryEffect {
			body = fmt.Sprintf("%s %s began (%s): %s", journal.EffectRef(r.ID), r.Kind, journal.RequestRef(r.RequestID), short(string(r.Detail)))
			break
		}
		body = fmt.Sprintf("%s %s receipt: %s", journal.EffectRef(r.ID), r.Kind, short(string(r.Receipt)))
	case journal.LogWait:
		deadline := "with no deadline"
		if r.Deadline != nil {
			deadline = "until " + stamp(*r.Deadline)
		}
		if e.Kind == journal.EntryWait {
			if r.State == journal.WaitInputPending {
				body = fmt.Sprintf("%s by %s returned at once, input pending through %s: %q", journal.WaitRef(r.ID), r.ExecutionID, journal.InputRef(*r.EventID), r.Reason)
				break
			}
			body = fmt.Sprintf("%s by %s accepted, the turn ends; waiting %s: %q", journal.WaitRef(r.ID), r.ExecutionID, deadline, r.Reason)
			break
		}
		body = fmt.Sprintf("%s %s", journal.WaitRef(r.ID), r.State)
		if r.EventID != nil {
			body += " by " + journal.InputRef(*r.EventID)
		}
	case journal.LogProgram:
		if e.Kind == journal.EntryProgramStart {
			body = fmt.Sprintf("program %s started: %s", r.RunID, short(r.Code))
			break
		}
		body = fmt.Sprintf("program %s ended %s", r.RunID, r.Status)
		if r.EndedAt != nil && r.Status != kiln.ProgramNotRun {
			body += fmt.Sprintf(" after %dms", r.EndedAt.Sub(r.StartedAt).Milliseconds())
		}
		if r.RefusedCalls > 0 {
			body += fmt.Sprintf(", %d tool calls refused unrecorded", r.RefusedCalls)
		}
		if r.Error != nil {
			body += ": " + short(*r.Error)
		}
	default:
		body = string(e.Kind)
	}
	fmt.Fprintf(w, "%s %s\n", head, body)
}

// short is text on one line, cut to logTextLimit bytes with an ellipsis and the count.
func short(text string) string {
	if v := jsontext.Value(text); v.IsValid() && len(text) > 0 && (text[0] == '{' || text[0] == '[' || text[0] == '"') {
		text = string(v) // compact JSON stays as it is
	}
	text = strings.ReplaceAll(text, "\n", "⏎")
	if len(text) <= logTextLimit {
		return text
	}
	n := logTextLimit
	for n > 0 && !utf8.RuneStart(text[n]) { // cut on a character boundary
		n--
	}
	return fmt.Sprintf("%s… (%d more bytes)", text[:n], len(text)-n)
}

// stamp is t as the host writes instants.
func stamp(t time.Time) string { return t.UTC().Format(journal.TimeLayout) }
