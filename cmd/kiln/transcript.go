package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
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
			st, err := flags.openExisting(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer st.Close()
			sess, err := st.SessionByName(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("%w in %s", err, st.Path())
			}
			if !done {
				t, err := transcript.Load(cmd.Context(), st, sess.ID)
				if err != nil {
					return err
				}
				messages = t.Render()
			}
			calls, err := modelCalls(cmd.Context(), st, sess.ID)
			if err != nil {
				return err
			}
			all := withCalls(messages, calls)
			if asJSON {
				data, err := json.Marshal(all, jsontext.EscapeForHTML(false))
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", data)
				return err
			}
			writeMessages(cmd.OutOrStdout(), all)
			return nil
		},
	}
	flags.addData(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the messages as one JSON array")
	return cmd
}

// roleModel is the role transcript show gives a model call.
const roleModel = "model"

// shown is a message as transcript show prints it; a model call's carries its record.
type shown struct {
	transcript.Message `json:",inline"`
	Call               jsontext.Value `json:"call,omitzero"`
}

// modelCalls are session's model calls, in journal order, as messages.
func modelCalls(ctx context.Context, st *store.Store, session int64) ([]shown, error) {
	log, err := st.Log(ctx, store.LogFilter{Session: session})
	if err != nil {
		return nil, err
	}
	var out []shown
	for _, e := range log {
		rec, ok := e.Record.(store.AgentRecord)
		if !ok || rec.Kind != store.KindModelCall {
			continue
		}
		var c kiln.ModelCall
		if err := json.Unmarshal(rec.Body, &c); err != nil {
			return nil, fmt.Errorf("model call record %d: %w", rec.ID, err)
		}
		m := transcript.Message{Seq: e.Seq, Role: roleModel, Content: callLine(c)}
		out = append(out, shown{Message: m, Call: rec.Body})
	}
	return out, nil
}

// callLine says what a model call was and used, on one line.
func callLine(c kiln.ModelCall) string {
	var totals kiln.Totals
	totals.Add(c)
	model := c.Route
	if c.Model != "" {
		model += "/" + c.Model
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[model call %d of turn %d · %s · %s", c.Seq, c.Turn, c.Purpose, model)
	if c.Error != "" {
		fmt.Fprintf(&b, " · failed: %s", c.Error)
	}
	if c.StopReason != "" {
		fmt.Fprintf(&b, " · stop %s", c.StopReason)
	}
	fmt.Fprintf(&b, " · %s · in %s · cached %s · write %s · out %s · cost %s]", transcript.Ran(time.Duration(c.LatencyMs)*time.Millisecond),
		count(totals.InputTokens), count(totals.CachedTokens), count(totals.CacheWrite), count(totals.OutputTokens), dollars(totals))
	return b.String()
}

// withCalls places each call before the first transcript message recorded after it,
// the header excepted; calls after the last message follow it.
func withCalls(messages []transcript.Message, calls []shown) []shown {
	out := make([]shown, 0, len(messages)+len(calls))
	for i, m := range messages {
		for i > 0 && len(calls) > 0 && calls[0].Seq < m.Seq {
			out, calls = append(out, calls[0]), calls[1:]
		}
		out = append(out, shown{Message: m})
	}
	return append(out, calls...)
}

// writeMessages prints each message under a line naming its role and record.
func writeMessages(w io.Writer, messages []shown) {
	for _, m := range messages {
		fmt.Fprintf(w, "──── %s (record %d) ────\n%s", m.Role, m.Seq, m.Content)
		if n := len(m.Content); n == 0 || m.Content[n-1] != '\n' {
			fmt.Fprintln(w)
		}
	}
}
