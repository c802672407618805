package main

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/store"
	kilnpy "github.com/kilnrt/kiln/python"
	"github.com/spf13/cobra"
)

// maxInputText bounds an operator input's text in characters: the bound of the agent's
// own speech (local.send), so that what an operator says fits where the agent's does.
const maxInputText = kiln.MaxSendText

// openPolicy is the policy the record's behavior epoch names, for a command that
// decides outside a workbench.
func openPolicy(ctx context.Context, st *store.Store, session string) (*policy.Manager, error) {
	python, err := interp.Find(ctx, "python3")
	if err != nil {
		return nil, err
	}
	return policy.NewManager(ctx, st, st.Dir(), policy.Config{Python: python.Path, Package: kilnpy.Sources(), SessionID: session})
}

func newSend() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "send --session NAME TEXT",
		Short: "Record an operator input for a session",
		Long: `Record TEXT as an input on the operator lane of session NAME: what a waiting agent
wakes on. The input is durable before send returns; it prints its reference, event:<id>,
then the attention.plan decision the active policy made for it, recorded with it.
A wait of the session that is open is woken by it; a later runtime.wait, or
runtime.inspect, finds it pending. While a daemon (kiln serve) holds the session, the
input goes through it.

TEXT is 1..4000 characters of UTF-8, the bound of the agent's own local.send; the
record must already exist (kiln init, or a kiln exec, makes it).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if flags.session == "" {
				return usageError{fmt.Errorf("--session NAME is required")}
			}
			name, err := flags.sessionName()
			if err != nil {
				return err
			}
			if n := utf8.RuneCountInString(args[0]); !utf8.ValidString(args[0]) || n == 0 || n > maxInputText {
				return usageError{fmt.Errorf("TEXT must be 1..%d characters of UTF-8; got %d bytes", maxInputText, len(args[0]))}
			}
			if done, err := sendThroughDaemon(cmd.Context(), cmd.OutOrStdout(), &flags, name, args[0]); done || err != nil {
				return err
			}
			st, err := flags.openExisting(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer st.Close()
			sess, err := st.SessionByName(cmd.Context(), name)
			if err != nil {
				return fmt.Errorf("%w in %s", err, st.Path())
			}
			ev, err := st.AppendEvent(cmd.Context(), sess.ID, store.SourceOperator, map[string]string{"text": args[0]})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "event:%d\n", ev.ID)
			m, err := openPolicy(cmd.Context(), st, name)
			if err != nil {
				return fmt.Errorf("deciding the attention of event:%d: %w", ev.ID, err)
			}
			defer m.Close()
			a, err := m.PlanEvent(cmd.Context(), ev)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "attention: %s\n", kiln.Attention{Action: kiln.AttentionAction(a.Action),
				Priority: a.Priority, Seconds: a.Seconds, Reason: a.Reason, Note: a.Note})
			return nil
		},
	}
	flags.addData(cmd)
	cmd.Flags().StringVar(&flags.session, "session", "", "the session to send to (required)")
	return cmd
}
