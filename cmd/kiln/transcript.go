package main

import (
	"fmt"
	"io"

	"github.com/kilnrt/kiln"
	"github.com/spf13/cobra"
)

func newTranscript() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transcript",
		Short: "Show what a model reads of a session",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return usageError{fmt.Errorf("name a subcommand: show")} },
	}
	cmd.AddCommand(newTranscriptShow())
	addJSON(cmd, nil, "print errors as JSON")
	return cmd
}

func newTranscriptShow() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show SESSION [--json]",
		Short: "Render a session's transcript as a model reads it, with the agent's model calls",
		Long: `Render the transcript of SESSION from its durable record: the instruction header it
pinned, then, in order, each input framed "[<time> · <source>]", each cell, each cell's
result framed "[<time> · ran <duration>]", and each observation that the instruction
text changed, with the verified patch or the text that reaches the current one. Frames
are derived from the record on every rendering; none is stored.

The agent's model calls are shown where they were made, as messages of role model: the
turn, purpose, route and model, stop reason, latency, the tokens as the route reported
them (input, cached, cache-written, output; "-" where it said nothing) and the cost ("-"
where a count or a price was absent). No model reads them.

With --json, a JSON array of {"seq","role","content"}: role is system (the header),
user (inputs and observations), assistant (cells), tool (results) or model (a model
call, whose "call" member is its record).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			messages, done, err := transcriptThroughDaemon(cmd.Context(), &flags, args[0])
			if err != nil {
				return err
			}
			j, err := flags.openJournal(cmd.Context())
			if err != nil {
				return err
			}
			defer j.Close()
			if done {
				messages, err = j.WithModelCalls(cmd.Context(), args[0], messages)
			} else {
				messages, err = j.Transcript(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), messages)
			}
			writeMessages(cmd.OutOrStdout(), messages)
			return nil
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, "print the messages as one JSON array")
	return cmd
}

// writeMessages prints each message under a line naming its role and record.
func writeMessages(w io.Writer, messages []kiln.Message) {
	for _, m := range messages {
		fmt.Fprintf(w, "──── %s (record %d) ────\n%s", m.Role, m.Seq, m.Content)
		if n := len(m.Content); n == 0 || m.Content[n-1] != '\n' {
			fmt.Fprintln(w)
		}
	}
}
