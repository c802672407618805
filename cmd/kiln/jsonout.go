package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/journal"
	"github.com/spf13/cobra"
)

// jsonFlag is the flag every command has for output a program reads: JSON on stdout,
// and an error as one JSON object there too (docs/cli.md).
const jsonFlag = "json"

// stampLayout is how kiln's JSON writes an instant: RFC 3339, in UTC, to the
// millisecond, the durable record's precision.
const stampLayout = "2006-01-02T15:04:05.000Z07:00"

// jsonOptions are how kiln prints JSON: maps in key order, instants as stampLayout, and
// text that is not UTF-8 (a record written before its source was cleaned, say) with
// U+FFFD for each run of bad bytes, not a failure that would end the output there.
func jsonOptions() json.Options {
	stamp := json.MarshalToFunc(func(enc *jsontext.Encoder, t time.Time) error {
		return enc.WriteToken(jsontext.String(t.UTC().Format(stampLayout)))
	})
	return json.JoinOptions(json.Deterministic(true), json.WithMarshalers(stamp), jsontext.AllowInvalidUTF8(true))
}

// printJSON prints v as one JSON line.
func printJSON(w io.Writer, v any) error {
	data, err := json.Marshal(v, jsonOptions())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// addJSON adds --json to cmd, kept in on (nil when the command reads it only to print
// its errors as JSON); what says what it prints.
func addJSON(cmd *cobra.Command, on *bool, what string) {
	if on == nil {
		on = new(bool)
	}
	cmd.Flags().BoolVar(on, jsonFlag, false, what)
}

// jsonRequested reports whether the command line asked for --json: cmd's flag when
// it was parsed, else (the command line was wrong before cobra reached it) a --json
// among args before "--".
func jsonRequested(cmd *cobra.Command, args []string) bool {
	if cmd != nil {
		if f := cmd.Flags().Lookup(jsonFlag); f != nil && f.Changed {
			return f.Value.String() == "true"
		}
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--"+jsonFlag {
			return true
		}
		if v, ok := strings.CutPrefix(a, "--"+jsonFlag+"="); ok {
			on, err := strconv.ParseBool(v)
			return err == nil && on
		}
	}
	return false
}

// Error codes: what went wrong, for a program to branch on. They are stable; the
// messages beside them are for people and may change.
const (
	codeUsage             = "usage"              // the command line was wrong (exit 2)
	codeNotFound          = "not_found"          // a session, record, file or interpreter that is not there
	codeBusy              = "busy"               // a cell is running where another was asked for
	codeSessionHeld       = "session_held"       // another living process holds the session
	codeStopped           = "stopped"            // the daemon's session is stopped
	codeNotRunning        = "not_running"        // an interrupt or cancel of what is not running
	codeDaemonUnreachable = "daemon_unreachable" // no daemon serves the data directory
	codeDaemonRunning     = "daemon_running"     // a daemon already serves the data directory
	codeDaemonRefused     = "daemon_refused"     // the daemon refused, for a reason not above
	codeClosed            = "closed"             // the workbench or runner was closed
	codeInterrupted       = "interrupted"        // Ctrl-C or a signal ended the command
	codeTimeout           = "timeout"            // a deadline passed
	codeFailed            = "failed"             // anything else
)

// codedError is an error of the command line's own with the code it is reported by.
type codedError struct {
	code string
	error
}

func (e codedError) Unwrap() error { return e.error }

// daemonCode is the code of the daemon's problem code (docs/serve.md): its own where
// one says the same, else daemon_refused.
func daemonCode(code string) string {
	switch code {
	case client.ProblemNotFound, client.ProblemNoSession, client.ProblemNoExecution, client.ProblemFileNotFound, client.ProblemNoDisplay:
		return codeNotFound
	case client.ProblemBusy:
		return codeBusy
	case client.ProblemSessionStopped:
		return codeStopped
	case client.ProblemNotRunning:
		return codeNotRunning
	}
	return codeDaemonRefused
}

// errorCode is the code err is reported by.
func errorCode(err error) string {
	var usage usageError
	var coded codedError
	var refused *client.DaemonError
	switch {
	case errors.As(err, &usage):
		return codeUsage
	case errors.As(err, &coded):
		return coded.code
	case errors.As(err, &refused):
		return daemonCode(refused.Code)
	case errors.Is(err, client.ErrNoDaemon):
		return codeDaemonUnreachable
	case errors.Is(err, daemon.ErrRunning):
		return codeDaemonRunning
	case errors.Is(err, kiln.ErrSessionHeld):
		return codeSessionHeld
	case errors.Is(err, kiln.ErrBusy):
		return codeBusy
	case errors.Is(err, journal.ErrNoSession), errors.Is(err, journal.ErrNoRecord), errors.Is(err, fs.ErrNotExist):
		return codeNotFound
	case errors.Is(err, kiln.ErrNotRunning):
		return codeNotRunning
	case errors.Is(err, kiln.ErrClosed), errors.Is(err, kiln.ErrRunnerClosed):
		return codeClosed
	case errors.Is(err, context.Canceled):
		return codeInterrupted
	case errors.Is(err, context.DeadlineExceeded):
		return codeTimeout
	}
	return codeFailed
}

// errorObject is how an error is printed under --json: {"error":{"code","message"}}.
type errorObject struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// printError prints err as one JSON line on w.
func printError(w io.Writer, err error) {
	printJSON(w, errorObject{errorBody{errorCode(err), unprefixed(err)}})
}

// commandEntry is one command as kiln --json lists it.
type commandEntry struct {
	Command string `json:"command"` // its path, "kiln sessions list"
	Short   string `json:"short"`
}

// commandList is every command under root that runs, in the order help shows them.
func commandList(root *cobra.Command) map[string][]commandEntry {
	var list []commandEntry
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			list = append(list, commandEntry{sub.CommandPath(), sub.Short})
			walk(sub)
		}
	}
	walk(root)
	return map[string][]commandEntry{"commands": list}
}
