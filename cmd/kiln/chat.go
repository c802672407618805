package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/client"
	"github.com/spf13/cobra"
)

func newChat() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	var agent client.AgentOptions
	cmd := &cobra.Command{
		Use:   "chat SESSION [--data DIR] [--route NAME] [--instructions TEXT | --instructions-file PATH]",
		Short: "Talk to a session's agent in kiln serve: type inputs, see its speech and steps",
		Long: `Open the operator lane of SESSION on the data directory's daemon (kiln serve), creating
the session if need be. Each line typed is sent as an input. The agent's confirmed
speech is printed as it is delivered ("agent: …"), held speech with its reason
("held (…): …"), and a live line per step: model calls, cells running, each turn's end
reason. When standard input ends, chat waits for the turns of what it sent to end, then
exits.

--route NAME runs the session's agent on kiln.toml's route NAME instead of the [agent]
route; --instructions TEXT or --instructions-file PATH give the session instructions of
its own, after the workspace's AGENTS.md (kiln.toml's [sessions.SESSION] gives defaults
of both). A session already open with another route or other instructions is refused.`,
		Args: usageArgs(cobra.ExactArgs(1)),
	}
	cmd.RunE = flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
		if agent.InstructionsFile != "" {
			abs, err := filepath.Abs(agent.InstructionsFile)
			if err != nil {
				return err
			}
			agent.InstructionsFile = abs
		}
		return chat(ctx, d, args[0], agent, cmd.InOrStdin(), out, asJSON)
	})
	flags.addData(cmd)
	cmd.Flags().StringVar(&agent.Route, "route", "", "the kiln.toml route of the session's agent; default the [agent] route")
	cmd.Flags().StringVar(&agent.Instructions, "instructions", "", "the text of the session's own instructions")
	cmd.Flags().StringVar(&agent.InstructionsFile, "instructions-file", "", "a file holding the session's own instructions; its edits are revisions")
	cmd.MarkFlagsMutuallyExclusive("instructions", "instructions-file")
	addJSON(cmd, &asJSON, "print each event of the session as the daemon sends it, one JSON object a line; a cell's has its record as kiln exec --json prints it")
	return cmd
}

func newTurnsCancel() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel SESSION [--data DIR]",
		Short: "Cancel the running turn of a session's agent in kiln serve",
		Long: `Cancel the running turn of SESSION's agent on the data directory's daemon: its model
call is aborted or its cell interrupted, and the turn ends cancelled.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
			cancelled, err := d.CancelTurn(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, map[string]bool{"cancelled": cancelled})
			}
			if cancelled {
				fmt.Fprintln(out, "cancelled the running turn")
			} else {
				fmt.Fprintln(out, "no turn was running")
			}
			return nil
		}),
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"cancelled"}, false when no turn was running`)
	return cmd
}

func newTurnsResume() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "resume SESSION [--data DIR]",
		Short: "Resume the last turn of a session's agent, which ended host_died or overflow",
		Long: `Record an input that resumes the last turn of SESSION's agent, which ended host_died (the
daemon stopped during it) or overflow: it names the turn and its inputs, and wakes the
agent, whose next turn carries on with the task (folding first when it is due). A last
turn that ended otherwise is refused.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: flags.withDaemon(func(ctx context.Context, d *client.Daemon, out io.Writer, args []string) error {
			turn, input, err := d.ResumeTurn(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, map[string]int64{"turn": turn, "input": input})
			}
			fmt.Fprintf(out, "resuming turn %d (input event:%d)\n", turn, input)
			return nil
		}),
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"turn","input"}`)
	return cmd
}

// chat runs the operator lane of session until in ends and the turns it started end.
func chat(ctx context.Context, d *client.Daemon, session string, agent client.AgentOptions, in io.Reader, out io.Writer, asJSON bool) error {
	if _, err := d.OpenSessionForAgent(ctx, session, agent); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var after int64 // chat shows what comes after the session's newest entry
	if err := d.Events(ctx, session, 0, false, func(e client.Event) error { after = e.Seq; return nil }); err != nil {
		return err
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	events := make(chan client.Event)
	streamErr := make(chan error, 1)
	go func() {
		streamErr <- d.EventsLive(ctx, session, after, func(e client.Event) error {
			select {
			case events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	// waiting: an input was sent and no turn has ended since; running: turns begun and
	// not ended.
	waiting, running, inputOpen := false, 0, true
	var call liveCall // the model call streaming now
	for {
		if !inputOpen && !waiting && running == 0 {
			return nil
		}
		select {
		case line, ok := <-lines:
			if !ok {
				inputOpen, lines = false, nil
				continue
			}
			if _, err := d.Send(ctx, session, line); err != nil {
				return err
			}
			waiting = true
		case e := <-events:
			if asJSON {
				v, err := eventOfChat(e)
				if err != nil {
					return err
				}
				if err := printJSON(out, v); err != nil {
					return err
				}
			} else {
				switch e.Kind {
				case "model.delta":
					call.piece(out, e)
				case "model_call":
					call.flush(out)
					renderChat(out, e)
				default:
					renderChat(out, e)
				}
			}
			switch e.Kind {
			case "turn.start":
				running++
			case "turn.end":
				running, waiting = max(running-1, 0), false
			}
		case err := <-streamErr:
			if err == nil {
				err = errors.New("the daemon ended the event stream")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// chatRecord is the parts of the records chat shows.
type chatRecord struct {
	Source  string `json:"source"`
	Payload struct {
		Text string `json:"text"`
	} `json:"payload"`
	Kind   string `json:"kind"`
	Detail struct {
		Text string `json:"text"`
	} `json:"detail"`
	Receipt *struct {
		Status string  `json:"status"`
		Reason *string `json:"reason"`
	} `json:"receipt"`
	CellID string         `json:"cell"`
	Status string         `json:"status"`
	Body   jsontext.Value `json:"body"`
}

// agentBody is the parts of an agent record chat shows.
type agentBody struct {
	Turn      int64  `json:"turn"`
	Purpose   string `json:"purpose"`
	Route     string `json:"route"`
	LatencyMs int64  `json:"latency_ms"`
	Error     string `json:"error"`
	EndReason string `json:"end_reason"`
	Detail    string `json:"detail"`
	Steps     int    `json:"steps"`
	Cell      string `json:"cell"`     // execution.review, execution.decision
	Verdict   string `json:"verdict"`  // execution.review
	Decision  string `json:"decision"` // execution.decision
	Reason    string `json:"reason"`   // execution.review, execution.decision
}

// renderChat prints an event as chat shows it.
func renderChat(w io.Writer, e client.Event) {
	var entry struct {
		Record chatRecord `json:"record"`
	}
	if json.Unmarshal(e.Raw, &entry, json.RejectUnknownMembers(false)) != nil {
		return
	}
	r := entry.Record
	var b agentBody
	if r.Body != nil {
		json.Unmarshal(r.Body, &b, json.RejectUnknownMembers(false))
	}
	switch e.Kind {
	case "event":
		if r.Source == "agent" {
			fmt.Fprintf(w, "agent: %s\n", r.Payload.Text)
		}
	case "receipt":
		if r.Kind == "local.send" && r.Receipt != nil && r.Receipt.Status == "held" {
			reason := ""
			if r.Receipt.Reason != nil {
				reason = *r.Receipt.Reason
			}
			fmt.Fprintf(w, "held (%s): %s\n", reason, r.Detail.Text)
		}
	case "turn.start":
		fmt.Fprintf(w, "· turn %d begins\n", b.Turn)
	case "model_call":
		if b.Error != "" {
			fmt.Fprintf(w, "· turn %d: %s call to %s failed: %s\n", b.Turn, b.Purpose, b.Route, b.Error)
		} else {
			fmt.Fprintf(w, "· turn %d: %s call to %s, %d ms\n", b.Turn, b.Purpose, b.Route, b.LatencyMs)
		}
	case "execution":
		fmt.Fprintf(w, "· cell %s running\n", r.CellID)
	case "execution.end":
		fmt.Fprintf(w, "· cell %s %s\n", r.CellID, r.Status)
	case "peer.opened", "peer.request", "peer.result", "peer.stopped":
		fmt.Fprintln(w, peerLine(e.Kind, r.Body))
	case "execution.review":
		if b.Verdict == "hold" {
			fmt.Fprintf(w, "· cell %s held for a decision (%s): kiln approve %s:%s (or --reject --reason …)\n",
				b.Cell, b.Reason, e.Session, b.Cell)
		}
	case "execution.decision":
		line := fmt.Sprintf("· cell %s %s", b.Cell, b.Decision)
		if b.Reason != "" {
			line += ": " + b.Reason
		}
		fmt.Fprintln(w, line)
	case "turn.end":
		line := fmt.Sprintf("· turn %d ended %s after %d steps", b.Turn, b.EndReason, b.Steps)
		if b.Detail != "" {
			line += ": " + b.Detail
		}
		fmt.Fprintln(w, line)
	}
}

// peerLine is the line chat shows of a peer record, in the parent's session and the
// peer's alike.
func peerLine(kind string, body jsontext.Value) string {
	var p struct {
		PeerID    string `json:"peer_id"`
		Parent    string `json:"parent"`
		RequestID string `json:"request_id"`
		State     string `json:"state"`
		Reason    string `json:"reason"`
		Detail    string `json:"detail"`
	}
	json.Unmarshal(body, &p, json.RejectUnknownMembers(false))
	switch kind {
	case "peer.opened":
		return fmt.Sprintf("· peer %s opened by %s", p.PeerID, p.Parent)
	case "peer.request":
		return fmt.Sprintf("· peer request %s: %s → %s", p.RequestID, p.Parent, p.PeerID)
	case "peer.result":
		line := fmt.Sprintf("· peer result %s: %s → %s, %s", p.RequestID, p.PeerID, p.Parent, p.State)
		if p.Detail != "" {
			line += " (" + p.Detail + ")"
		}
		return line
	}
	return fmt.Sprintf("· peer %s %s: %s", p.PeerID, p.State, p.Reason)
}
