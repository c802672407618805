package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/journal"
	"github.com/spf13/cobra"
)

func newSend() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "send --session NAME TEXT",
		Short: "Record an operator input for a session",
		Long: `Record TEXT as an input on the operator lane of session NAME: what a waiting agent
wakes on. The input is durable before send returns; it prints its reference, event:<id>,
then the attention.plan decision the active policy made for it, recorded with it.
A wait of the session that is open is woken by it; a later runtime.wait, or
runtime.inspect, finds it pending. While a daemon (kiln serve) runs on the data
directory, the input goes through it: a session it does not hold yet, it opens, as kiln
chat does, so that its agent takes the input.

TEXT is 1..4000 characters of UTF-8, the bound of the agent's own local.send. Without a
daemon, the session must already be in the record (kiln init, or a kiln exec, makes it).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if flags.session == "" {
				return usageError{fmt.Errorf("--session NAME is required")}
			}
			name, err := flags.sessionName()
			if err != nil {
				return err
			}
			if err := admin.ValidSendText(args[0]); err != nil {
				return usageError{err}
			}
			out := cmd.OutOrStdout()
			show := func(in client.Input) {
				if asJSON {
					printJSON(out, in)
					return
				}
				fmt.Fprintf(out, "%s\nattention: %s\n", in.Ref, in.Attention)
			}
			if done, err := sendOpening(cmd.Context(), show, &flags, name, args[0]); done || err != nil {
				return err
			}
			dir, err := flags.dataDir()
			if err != nil {
				return err
			}
			in, err := admin.Send(cmd.Context(), dir, name, args[0])
			if errors.Is(err, journal.ErrNoSession) {
				return fmt.Errorf("%w; no daemon runs on %s to open it: start kiln serve --data %s, or make the session (kiln exec --session %s)",
					err, dir, dir, name)
			}
			if err != nil {
				if in.Ref != "" && !asJSON {
					fmt.Fprintln(out, in.Ref)
				}
				return err
			}
			show(in)
			return nil
		},
	}
	flags.addData(cmd)
	cmd.Flags().StringVar(&flags.session, "session", "", "the session to send to (required)")
	addJSON(cmd, &asJSON, `print one JSON object: {"id","ref","attention"}`)
	return cmd
}

// sendOpening sends text to session through the data directory's daemon, if one runs,
// opening the session first when the daemon does not hold it; done is false when no
// daemon runs, or the session is one it stopped.
func sendOpening(ctx context.Context, show func(client.Input), flags *dataFlags, session, text string) (done bool, err error) {
	d, err := flags.daemon(ctx)
	if d == nil || err != nil {
		return false, err
	}
	defer d.Close()
	in, err := d.Send(ctx, session, text)
	var p *client.DaemonError
	if errors.As(err, &p) && p.Code == client.ProblemNoSession {
		if _, err = d.OpenSession(ctx, session); err == nil {
			in, err = d.Send(ctx, session, text)
		}
	}
	if notTheDaemons(err) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	show(in)
	return true, nil
}
