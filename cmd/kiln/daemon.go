package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/client"
	"github.com/spf13/cobra"
)

// daemon returns a client of the daemon serving the data directory, or nil when none
// does.
func (f *dataFlags) daemon(ctx context.Context) (*client.Daemon, error) {
	dir, err := f.dataDir()
	if err != nil {
		return nil, err
	}
	d, err := client.DialDaemon(ctx, dir)
	if errors.Is(err, client.ErrNoDaemon) {
		return nil, nil
	}
	return d, err
}

// withDaemon makes a command's RunE that runs run with a client of the daemon serving
// the data directory, and fails, saying so, when none does.
func (f *dataFlags) withDaemon(run func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		d, err := f.daemon(cmd.Context())
		if err != nil {
			return err
		}
		if d == nil {
			dir, _ := f.dataDir()
			return codedError{codeDaemonUnreachable, fmt.Errorf("no daemon serves %s: start one with kiln serve", dir)}
		}
		defer d.Close()
		return run(cmd.Context(), d, cmd.OutOrStdout(), args)
	}
}

// notTheDaemons says err is the daemon's answer that it does not hold the session, which
// a command then serves from the record alone.
func notTheDaemons(err error) bool {
	var p *client.DaemonError
	return errors.As(err, &p) && (p.Code == client.ProblemNoSession || p.Code == client.ProblemSessionStopped)
}

func newSessions() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Manage the sessions a daemon holds: list, show, stop, prune, fold, reset",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{fmt.Errorf("name a subcommand: list, show, stop, prune, fold or reset")}
		},
	}
	var flags dataFlags
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the daemon's sessions, open and stopped",
		Args:  usageArgs(cobra.NoArgs),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, _ []string) error {
			list, err := d.Sessions(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, list)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tSTATE\tGENERATION\tRUNNING\tLAST ACTIVE")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.State, dash(s.Generation), dash(s.Running), s.LastActiveAt.Format(time.RFC3339))
			}
			return tw.Flush()
		}),
	}
	show := &cobra.Command{
		Use:   "show SESSION",
		Short: "Show one session as JSON, with the peers it opened as a tree",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
			s, err := d.Session(ctx, args[0])
			if err != nil {
				return err
			}
			peers, err := d.Peers(ctx, args[0])
			if err != nil {
				return err
			}
			return printJSON(out, struct {
				client.DaemonSession `json:",inline"`
				Peers                []client.Peer `json:"peers"`
			}{s, peers})
		}),
	}
	stop := &cobra.Command{
		Use:   "stop SESSION",
		Short: "Stop a session: a running cell is interrupted and recorded, its worker ends",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
			s, err := d.StopSession(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, s)
			}
			fmt.Fprintf(out, "%s stopped\n", s.ID)
			return nil
		}),
	}
	var olderThan time.Duration
	prune := &cobra.Command{
		Use:   "prune [--older-than D]",
		Short: "Forget the stopped sessions and remove their directories; their durable records stay",
		Long: `Forget the stopped sessions, or with --older-than D those stopped more than D ago
(e.g. 168h), and remove their directories, <data>/sessions/<id>; their durable
records stay, for kiln log. A daemon with retention = "D" in kiln.toml does this by
itself.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, _ []string) error {
			if olderThan < 0 {
				return usageError{fmt.Errorf("--older-than must not be negative, got %s", olderThan)}
			}
			gone, err := d.PruneSessionsOlderThan(ctx, olderThan)
			if asJSON {
				if gone == nil {
					gone = []string{}
				}
				if err == nil {
					return printJSON(out, map[string][]string{"pruned": gone})
				}
				return err
			}
			for _, id := range gone {
				fmt.Fprintf(out, "%s pruned\n", id)
			}
			return err
		}),
	}
	fold := &cobra.Command{
		Use:   "fold SESSION",
		Short: "Fold the conversation of a session's agent now: a summary replaces it",
		Long: `Fold the conversation of SESSION's agent now, between turns (after the turn running): one
model call summarizes it, the summary replaces it in every later request, and the
instruction text is pinned again, as a fold the window makes. A fold that fails is
recorded and the conversation kept; an empty conversation is refused.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
			f, err := d.Fold(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, f)
			}
			fmt.Fprintf(out, "folded %d messages (about %d tokens) into a summary of %d bytes\n", f.Covers, f.TokensBefore, len(f.Summary))
			return nil
		}),
	}
	reset := &cobra.Command{
		Use:   "reset SESSION",
		Short: "Begin a new transcript segment of a session's agent; the record is kept",
		Long: `Begin a new transcript segment of SESSION's agent, between turns (after the turn running):
its conversation and summary are dropped without a model call, and its next turn starts
from the instruction text, pinned again, and its inputs. Nothing of the durable record
is removed: kiln log and kiln turns still show it all, and a fold record marks the reset.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
			f, err := d.Reset(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, f)
			}
			fmt.Fprintf(out, "reset: %d messages left behind; the next turn starts a new segment\n", f.Covers)
			return nil
		}),
	}
	for _, c := range []*cobra.Command{list, show, stop, prune, fold, reset} {
		flags.addData(c)
		cmd.AddCommand(c)
	}
	addJSON(cmd, nil, "print errors as JSON")
	addJSON(list, &asJSON, "print the sessions as one JSON array")
	addJSON(show, nil, "the session is JSON in any case")
	addJSON(stop, &asJSON, "print the stopped session as one JSON object")
	addJSON(prune, &asJSON, `print one JSON object: {"pruned":[SESSION…]}`)
	addJSON(fold, &asJSON, `print the fold's record as one JSON object: {"turn","covers_messages","summary",…}`)
	addJSON(reset, &asJSON, `print the reset's record as one JSON object: {"turn","covers_messages","reset":true,…}`)
	prune.Flags().DurationVar(&olderThan, "older-than", 0, "forget only the sessions stopped more than this long ago (e.g. 168h); 0 means every stopped one")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// followLog calls printNew each time the daemon's event stream tells of entries after
// since, until ctx ends (Ctrl-C ends it cleanly).
func followLog(ctx context.Context, d *client.Daemon, since int64, printNew func() error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	err := d.Events(ctx, "", since, true, func(client.Event) error { return printNew() })
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		return errors.New("the daemon ended the event stream (it stopped)")
	}
	return err
}

// transcriptThroughDaemon reads session's transcript as the daemon that holds it
// renders it; done is false when no daemon holds it.
func transcriptThroughDaemon(ctx context.Context, flags *dataFlags, session string) (messages []kiln.Message, done bool, err error) {
	d, err := flags.daemon(ctx)
	if d == nil || err != nil {
		return nil, false, err
	}
	defer d.Close()
	messages, err = d.Transcript(ctx, session)
	if notTheDaemons(err) {
		return nil, false, nil
	}
	return messages, true, err
}
