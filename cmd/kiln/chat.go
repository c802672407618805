package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	"github.com/spf13/cobra"
)

// maxEventLine bounds one line of the daemon's event stream that chat reads.
const maxEventLine = 8 << 20

func newChat() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "chat SESSION [--data DIR]",
		Short: "Talk to a session's agent in kiln serve: type inputs, see its speech and steps",
		Long: `Open the operator lane of SESSION on the data directory's daemon (kiln serve), creating
the session if need be. Each line typed is sent as an input. The agent's confirmed
speech is printed as it is delivered ("agent: …"), held speech with its reason
("held (…): …"), and a live line per step: model calls, cells running, each turn's end
reason. When standard input ends, chat waits for the turns of what it sent to end, then
exits.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := flags.dataDir()
			if err != nil {
				return err
			}
			c, err := dialDaemon(dir)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			return chat(cmd.Context(), c, args[0], cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	flags.addData(cmd)
	return cmd
}

func newTurnsCancel() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "cancel SESSION [--data DIR]",
		Short: "Cancel the running turn of a session's agent in kiln serve",
		Long: `Cancel the running turn of SESSION's agent on the data directory's daemon: its model
call is aborted or its cell interrupted, and the turn ends cancelled.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := flags.dataDir()
			if err != nil {
				return err
			}
			c, err := dialDaemon(dir)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			var reply struct {
				Cancelled bool `json:"cancelled"`
			}
			if err := c.call(cmd.Context(), "POST", "/v1/sessions/"+args[0]+"/turn:cancel", nil, &reply); err != nil {
				return err
			}
			if reply.Cancelled {
				fmt.Fprintln(cmd.OutOrStdout(), "cancelled the running turn")
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "no turn was running")
			}
			return nil
		},
	}
	flags.addData(cmd)
	return cmd
}

// daemon is an HTTP client of the data directory's daemon, over its socket.
type daemon struct{ *http.Client }

// dialDaemon is the client of dir's daemon; an error when none serves there.
func dialDaemon(dir string) (daemon, error) {
	sock := kiln.SocketPath(dir)
	if _, err := os.Stat(sock); err != nil {
		return daemon{}, fmt.Errorf("no daemon serves %s: start kiln serve --data %s", filepath.Dir(sock), dir)
	}
	return daemon{&http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}}, nil
}

// call sends body as JSON and decodes a 2xx answer into out (nil: discarded); another
// answer is an error carrying the daemon's problem text.
func (d daemon) call(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://kiln"+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.Do(req)
	if err != nil {
		return fmt.Errorf("the daemon: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxEventLine))
	if err != nil {
		return fmt.Errorf("the daemon: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return &daemonError{status: resp.StatusCode, body: strings.TrimSpace(string(data))}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out, json.RejectUnknownMembers(false))
}

// daemonError is a daemon's answer that was not a success.
type daemonError struct {
	status int
	body   string
}

func (e *daemonError) Error() string {
	return fmt.Sprintf("the daemon answered %d: %s", e.status, e.body)
}

// entry is a journal entry of the event stream, as chat reads it.
type entry struct {
	Seq    int64          `json:"seq"`
	Kind   string         `json:"kind"`
	Record jsontext.Value `json:"record"`
}

// chat runs the operator lane of session until in ends and the turns it started end.
func chat(ctx context.Context, d daemon, session string, in io.Reader, out io.Writer) error {
	err := d.call(ctx, "POST", "/v1/sessions", map[string]string{"id": session}, nil)
	var de *daemonError
	if err != nil && !(errors.As(err, &de) && de.status == http.StatusConflict) {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	after, err := lastSeq(ctx, d, session)
	if err != nil {
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
	entries := make(chan entry)
	streamErr := make(chan error, 1)
	go func() { streamErr <- stream(ctx, d, session, after, entries) }()
	// waiting: an input was sent and no turn has ended since; running: turns begun and
	// not ended.
	waiting, running, inputOpen := false, 0, true
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
			var reply struct {
				ID int64 `json:"id"`
			}
			if err := d.call(ctx, "POST", "/v1/sessions/"+session+"/inputs", map[string]string{"text": line}, &reply); err != nil {
				return err
			}
			waiting = true
		case e := <-entries:
			renderChat(out, e)
			switch e.Kind {
			case "turn.start":
				running++
			case "turn.end":
				running, waiting = max(running-1, 0), false
			}
		case err := <-streamErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lastSeq is the session's newest sequence number: chat shows what comes after it.
func lastSeq(ctx context.Context, d daemon, session string) (int64, error) {
	var last int64
	err := streamFrom(ctx, d, "/v1/sessions/"+session+"/events?follow=0", func(e entry) { last = e.Seq })
	return last, err
}

// stream sends the session's entries after seq to entries until ctx ends.
func stream(ctx context.Context, d daemon, session string, after int64, entries chan<- entry) error {
	return streamFrom(ctx, d, fmt.Sprintf("/v1/sessions/%s/events?after=%d", session, after), func(e entry) {
		select {
		case entries <- e:
		case <-ctx.Done():
		}
	})
}

func streamFrom(ctx context.Context, d daemon, path string, each func(entry)) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://kiln"+path, nil)
	if err != nil {
		return err
	}
	resp, err := d.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the daemon's events: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &daemonError{status: resp.StatusCode, body: strings.TrimSpace(string(data))}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, maxEventLine)
	for sc.Scan() {
		var e entry
		if err := json.Unmarshal(sc.Bytes(), &e, json.RejectUnknownMembers(false)); err != nil || e.Kind == "heartbeat" {
			continue
		}
		each(e)
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
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
	CellID string         `json:"execution_id"`
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
}

// renderChat prints an entry as chat shows it.
func renderChat(w io.Writer, e entry) {
	var r chatRecord
	if json.Unmarshal(e.Record, &r, json.RejectUnknownMembers(false)) != nil {
		return
	}
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
	case "turn.end":
		line := fmt.Sprintf("· turn %d ended %s after %d steps", b.Turn, b.EndReason, b.Steps)
		if b.Detail != "" {
			line += ": " + b.Detail
		}
		fmt.Fprintln(w, line)
	}
}
