// Package client talks to a running kiln daemon (kiln serve) over its HTTP API: on
// the Unix socket of its data directory, or over TCP with its bearer token. It opens,
// lists and stops sessions, runs cells in them with their output as it comes, sends
// inputs, and follows a session's events.
package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/wire"
)

// SocketFile is the daemon's Unix socket in its data directory, 0600.
const SocketFile = "kiln.sock"

// SocketPath is the path of the daemon's socket in dataDir.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, SocketFile) }

// ErrNoDaemon is a data directory no daemon serves.
var ErrNoDaemon = errors.New("kiln: no daemon serves the data directory")

// clientPollMS is how long one long poll of a daemon client waits for a cell.
const clientPollMS = 60000

// DaemonError is a problem a daemon answered with: its HTTP status, stable code, and
// detail.
type DaemonError struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	// Holder is, for ProblemHeldElsewhere, the URL of the daemon that holds the
	// session, where its writes go.
	Holder string `json:"holder"`
}

// Error says what the daemon refused, and why.
func (e *DaemonError) Error() string {
	return fmt.Sprintf("kiln: the daemon refused: %s (%d %s)", e.Detail, e.Status, e.Code)
}

// Problem codes: a DaemonError's Code, one kind of failure each, stable across
// versions (docs/serve.md).
const (
	ProblemMalformedJSON    = "malformed_json"         // 400: the body is not JSON
	ProblemUnknownField     = "unknown_field"          // 400: the body has a member the request does not define
	ProblemInvalid          = "invalid_request"        // 400: a member is missing, of the wrong type, or out of range
	ProblemProgramInvalid   = "program_invalid"        // 400: a program the runner refuses
	ProblemUnauthorized     = "unauthorized"           // 401: no bearer token, or the wrong one
	ProblemFileRefused      = "file_refused"           // 403: a path out of the session's directory, or not a regular file
	ProblemNotFound         = "not_found"              // 404: no such route
	ProblemNoSession        = "session_not_found"      // 404: no such session
	ProblemNoExecution      = "execution_not_found"    // 404: no such execution
	ProblemNoDisplay        = "display_not_found"      // 404: the execution has no display item of that index
	ProblemFileNotFound     = "file_not_found"         // 404: no such file in the session's directory
	ProblemMethodNotAllowed = "method_not_allowed"     // 405
	ProblemBusy             = "busy"                   // 409: a cell is running in the session
	ProblemSessionExists    = "session_exists"         // 409: the session is open
	ProblemSettingsDiffer   = "settings_differ"        // 409: the session is open with other settings, which Detail names
	ProblemNotRunning       = "not_running"            // 409: the execution has ended
	ProblemNoAgent          = "no_agent"               // 409: a turn cancelled on a session that runs no agent
	ProblemKeyReused        = "idempotency_key_reused" // 409: an idempotency key reused for other code
	ProblemHeldElsewhere    = "held_elsewhere"         // 409: another daemon on the shared record holds the session; Holder is its URL
	ProblemSessionStopped   = "session_stopped"        // 410: the session is stopped
	ProblemTooLarge         = "body_too_large"         // 413
	ProblemMediaType        = "unsupported_type"       // 415: the body is not application/json
	ProblemTooMany          = "too_many"               // 429: the daemon holds its most open sessions, or streams
	ProblemInternal         = "internal"               // 500
	ProblemUnavailable      = "unavailable"            // 503: the daemon is stopping
)

// Daemon is a client of a running daemon.
type Daemon struct {
	http  *http.Client
	base  string
	token string
}

// DialDaemon connects to the daemon serving dataDir on its socket, or fails with
// ErrNoDaemon when none does.
func DialDaemon(ctx context.Context, dataDir string) (*Daemon, error) {
	sock := SocketPath(dataDir)
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %s", ErrNoDaemon, dataDir)
		}
		return nil, fmt.Errorf("kiln: daemon: %w", err)
	}
	conn.Close()
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}
	return &Daemon{http: &http.Client{Transport: &http.Transport{DialContext: dial}}, base: "http://kiln"}, nil
}

// ConnectDaemon is a client of the daemon at url (http://host:port) with its token.
func ConnectDaemon(url, token string) *Daemon {
	return &Daemon{http: &http.Client{Transport: &http.Transport{}}, base: url, token: token}
}

// Close lets the client's idle connections go.
func (c *Daemon) Close() { c.http.CloseIdleConnections() }

// request sends method path with body (JSON unless nil) and returns the response, a
// problem answered as a *DaemonError.
func (c *Daemon) request(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("kiln: %w", err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, fmt.Errorf("kiln: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kiln: daemon: %w", err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		p := &DaemonError{Status: resp.StatusCode}
		if json.Unmarshal(data, p, json.RejectUnknownMembers(false)) != nil || p.Code == "" {
			p.Detail = string(data)
		}
		return nil, p
	}
	return resp, nil
}

// call sends a request and decodes its JSON answer into v.
func (c *Daemon) call(ctx context.Context, method, path string, body, v any) (*http.Response, error) {
	resp, err := c.request(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && v != nil {
		err = json.Unmarshal(data, v, json.RejectUnknownMembers(false))
	}
	if err != nil {
		return nil, fmt.Errorf("kiln: daemon: %s %s: %w", method, path, err)
	}
	return resp, nil
}

// DaemonSession is a session as a daemon shows it.
type DaemonSession struct {
	ID           string     `json:"id"`
	State        string     `json:"state"`      // "open" or "stopped"
	Generation   string     `json:"generation"` // of the live workbench; "" when none is live
	Running      string     `json:"running"`    // the execution running, "" when none
	CreatedAt    time.Time  `json:"created_at"`
	LastActiveAt time.Time  `json:"last_active_at"`
	StoppedAt    *time.Time `json:"stopped_at"`
	StopReason   string     `json:"stop_reason"`
	// Config is what the session was opened with.
	Config SessionConfig `json:"config"`
	// Sandbox is what confines the live generation; nil when none is live.
	Sandbox *kiln.SandboxApplied `json:"sandbox,omitempty"`
}

// SessionConfig is what a daemon session was opened with, as the daemon shows it.
type SessionConfig struct {
	MCP              []SessionMCP  `json:"mcp,omitempty"`
	Route            string        `json:"route,omitempty"`
	Instructions     string        `json:"instructions,omitempty"`
	InstructionsFile string        `json:"instructions_file,omitempty"`
	Sandbox          string        `json:"sandbox,omitempty"` // "" is the daemon's
	Network          string        `json:"network,omitempty"` // "" is the daemon's
	Limits           SessionLimits `json:"limits,omitzero"`
}

// SessionLimits bound a daemon session and its cells: IdleTimeoutMS,
// InterruptGraceMS, StartTimeoutMS and ToolTimeoutMS; MemoryBytes (each generation's
// memory), CPUSeconds and WallMS (each cell's) and MaxProcesses (tasks at once; needs
// a confining sandbox). A zero field takes the daemon's (none, unless its kiln.toml
// gives one). It is the daemon's own type; docs/sandbox.md has the bounds.
type SessionLimits = limits.Session

// ErrSessionTools is a daemon session opened again naming other MCP servers than it
// was created with: a session's servers are fixed while it is open.
var ErrSessionTools = errors.New("kiln: the daemon's session has other MCP servers")

// SessionMCP is an MCP server as a daemon's session names it.
type SessionMCP struct {
	Name    string   `json:"name"`
	Command []string `json:"command,omitempty"`
	URL     string   `json:"url,omitempty"`
}

// OpenSession opens session id on the daemon, or finds it open.
func (c *Daemon) OpenSession(ctx context.Context, id string) (DaemonSession, error) {
	return c.OpenSessionWithTools(ctx, id, nil, 0)
}

// OpenSessionWithTools is OpenSession of a session whose cells call the tools of
// servers as tools.<name>.<tool>, each call bounded by timeout (0: the default). The
// daemon starts the servers with the session (a command runs in the daemon's
// environment, so Env must be nil) and stops them when it stops. A session found open
// keeps the servers and timeout it was created with: naming other servers is
// ErrSessionTools, and naming none takes it as it is.
func (c *Daemon) OpenSessionWithTools(ctx context.Context, id string, servers []kiln.MCPServer, timeout time.Duration) (DaemonSession, error) {
	return c.OpenSessionWith(ctx, id, SessionOptions{MCP: servers, ToolTimeout: timeout})
}

// SessionOptions are what a daemon session is opened with beyond the daemon's: MCP
// servers and a tool timeout, as OpenSessionWithTools takes them; a sandbox profile
// and network ("" takes the daemon's); and limits (Limits.ToolTimeoutMS aside, which
// ToolTimeout gives).
type SessionOptions struct {
	MCP              []kiln.MCPServer
	ToolTimeout      time.Duration
	Sandbox, Network string
	Limits           SessionLimits
}

// ErrSessionSettings is a daemon session opened again naming another sandbox, network
// or limit than it was opened with: they are fixed while it is open.
var ErrSessionSettings = errors.New("kiln: the daemon's session is open with other settings")

// OpenSessionWith is OpenSession of a session opened with opts. A session found open
// keeps what it was opened with: naming other servers is ErrSessionTools, and another
// sandbox, network or limit ErrSessionSettings, in the words of the daemon, which
// decides; naming none takes it as it is. The tool timeout is the session's own: a
// session found open keeps its own, whatever opts gives.
func (c *Daemon) OpenSessionWith(ctx context.Context, id string, opts SessionOptions) (DaemonSession, error) {
	var mcp []SessionMCP
	for _, m := range opts.MCP {
		if m.Env != nil {
			return DaemonSession{}, fmt.Errorf("kiln: mcp server %s: a daemon runs it in its own environment; give no Env", m.Name)
		}
		mcp = append(mcp, SessionMCP{Name: m.Name, Command: m.Command, URL: m.URL})
	}
	limits := opts.Limits
	limits.ToolTimeoutMS = 0
	if opts.ToolTimeout > 0 {
		limits.ToolTimeoutMS = max(opts.ToolTimeout.Milliseconds(), 1)
	}
	body := map[string]any{"id": id, "mcp": mcp}
	if limits != (SessionLimits{}) {
		body["limits"] = limits
	}
	if opts.Sandbox != "" {
		body["sandbox"] = opts.Sandbox
	}
	if opts.Network != "" {
		body["network"] = opts.Network
	}
	open, found, err := c.createOrFind(ctx, id, body)
	var p *DaemonError
	if errors.As(err, &p) && p.Code == ProblemSettingsDiffer {
		return open, fmt.Errorf("%w: %s; stop it first (kiln sessions stop %s), or name another session", ErrSessionSettings, p.Detail, id)
	}
	if err != nil || !found {
		return open, err
	}
	same := func(a, b SessionMCP) bool {
		return a.Name == b.Name && a.URL == b.URL && slices.Equal(a.Command, b.Command)
	}
	if len(mcp) > 0 && !slices.EqualFunc(open.Config.MCP, mcp, same) {
		names := []string{}
		for _, m := range open.Config.MCP {
			names = append(names, m.Name)
		}
		return open, fmt.Errorf("%w: session %s is open with [%s]; stop it first (kiln sessions stop %s), or name another session",
			ErrSessionTools, id, strings.Join(names, ", "), id)
	}
	return open, nil
}

// ErrSessionRoute is a daemon session opened again naming another route, or other
// instructions, than it runs on.
var ErrSessionRoute = errors.New("kiln: the daemon's session runs on another route")

// AgentOptions are what a daemon session's agent runs with, beyond the daemon's: the
// kiln.toml route of its steps ("" is kiln.toml's [sessions.ID] route, else the [agent]
// route) and the session's own instructions, a text or a file (absolute, or relative to
// the daemon's workspace), not both.
type AgentOptions struct {
	Route            string
	Instructions     string
	InstructionsFile string
}

// OpenSessionForAgent is OpenSession of a session whose agent runs with opts. A session
// found open with another route or other instructions than opts names is
// ErrSessionRoute.
func (c *Daemon) OpenSessionForAgent(ctx context.Context, id string, opts AgentOptions) (DaemonSession, error) {
	body := map[string]any{"id": id, "route": opts.Route}
	if opts.Instructions != "" {
		body["instructions"] = opts.Instructions
	}
	if opts.InstructionsFile != "" {
		body["instructions_file"] = opts.InstructionsFile
	}
	open, found, err := c.createOrFind(ctx, id, body)
	if err != nil || !found {
		return open, err
	}
	have := open.Config
	switch {
	case opts.Route != "" && have.Route != opts.Route:
		return open, fmt.Errorf("%w: session %s is open on route %q; stop it first (kiln sessions stop %s), or name another session",
			ErrSessionRoute, id, have.Route, id)
	case opts.Instructions != "" && have.Instructions != opts.Instructions,
		opts.InstructionsFile != "" && filepath.IsAbs(opts.InstructionsFile) && have.InstructionsFile != filepath.Clean(opts.InstructionsFile):
		return open, fmt.Errorf("%w: session %s is open with other instructions; stop it first (kiln sessions stop %s), or name another session",
			ErrSessionRoute, id, id)
	}
	return open, nil
}

// createOrFind creates session id as body asks or, when it exists, describes it as it
// is; found says which.
func (c *Daemon) createOrFind(ctx context.Context, id string, body map[string]any) (s DaemonSession, found bool, err error) {
	_, err = c.call(ctx, "POST", "/v1/sessions", body, &s)
	var p *DaemonError
	if !errors.As(err, &p) || p.Code != ProblemSessionExists {
		return s, false, err
	}
	if _, err := c.call(ctx, "GET", "/v1/sessions/"+url.PathEscape(id), nil, &s); err != nil {
		return DaemonSession{}, true, err
	}
	return s, true, nil
}

// Session describes session id.
func (c *Daemon) Session(ctx context.Context, id string) (DaemonSession, error) {
	var s DaemonSession
	_, err := c.call(ctx, "GET", "/v1/sessions/"+url.PathEscape(id), nil, &s)
	return s, err
}

// Peer is a session another opened (peer.open), as the daemon describes it: its state,
// open requests, turns and usage so far, and its own peers (docs/peers.md).
type Peer = peer.Info

// Peers describes the peers session opened, each with its own, as a tree.
func (c *Daemon) Peers(ctx context.Context, session string) ([]Peer, error) {
	var tree struct {
		Peers []Peer `json:"peers"`
	}
	_, err := c.call(ctx, "GET", "/v1/sessions/"+url.PathEscape(session)+"/peers", nil, &tree)
	return tree.Peers, err
}

// Sessions lists the daemon's sessions.
func (c *Daemon) Sessions(ctx context.Context) ([]DaemonSession, error) {
	var list struct {
		Sessions []DaemonSession `json:"sessions"`
	}
	_, err := c.call(ctx, "GET", "/v1/sessions", nil, &list)
	return list.Sessions, err
}

// StopSession stops session id: a running cell is interrupted and recorded.
func (c *Daemon) StopSession(ctx context.Context, id string) (DaemonSession, error) {
	var s DaemonSession
	_, err := c.call(ctx, "DELETE", "/v1/sessions/"+url.PathEscape(id), nil, &s)
	return s, err
}

// PruneSessions forgets the stopped sessions and returns their ids; their records stay.
func (c *Daemon) PruneSessions(ctx context.Context) ([]string, error) {
	return c.PruneSessionsOlderThan(ctx, 0)
}

// PruneSessionsOlderThan forgets the sessions stopped more than age ago (every stopped
// one when age is 0) and returns their ids; their records stay.
func (c *Daemon) PruneSessionsOlderThan(ctx context.Context, age time.Duration) ([]string, error) {
	var p struct {
		Pruned []string `json:"pruned"`
	}
	path := "/v1/sessions:prune"
	if age != 0 {
		path += "?older_than=" + age.String()
	}
	_, err := c.call(ctx, "POST", path, nil, &p)
	return p.Pruned, err
}

// daemonRecord is an execution as the daemon sends it.
type daemonRecord struct {
	ID             string         `json:"id"`
	Cell           string         `json:"cell"`
	Generation     string         `json:"generation"`
	Status         string         `json:"status"`
	Output         []kiln.Output  `json:"output"`
	TruncatedBytes int64          `json:"truncated_bytes"`
	Error          *string        `json:"error"`
	NamespaceLost  bool           `json:"namespace_lost"`
	Limit          kiln.CellLimit `json:"limit,omitempty"`
	FreshNamespace bool           `json:"fresh_namespace"`
	StartedAt      time.Time      `json:"started_at"`
	// EndedAt is when the cell's end was recorded; nil while it runs.
	EndedAt   *time.Time      `json:"ended_at"`
	Exception *kiln.Exception `json:"exception"`
}

// record is the cell's record, of session.
func (r daemonRecord) record(session string) kiln.Record {
	rec := kiln.Record{Session: session, ID: r.Cell, Generation: r.Generation, Status: kiln.CellStatus(r.Status), Output: r.Output,
		TruncatedBytes: r.TruncatedBytes, Error: r.Error, NamespaceLost: r.NamespaceLost || r.FreshNamespace,
		StartedAt: r.StartedAt.UTC(), Exception: r.Exception, Limit: r.Limit}
	if r.EndedAt != nil {
		rec.DurationMs = max(r.EndedAt.Sub(r.StartedAt).Milliseconds(), 0)
	}
	if r.FreshNamespace {
		rec.NamespaceLostReason = "the cell ran in a new namespace, generation " + r.Generation +
			": the session's earlier generation ended (the daemon restarted, or its worker was stopped)"
	}
	return rec
}

// DaemonStartGrace is how long Daemon.Execute still waits for the daemon to answer a
// cell's start once its ctx has ended: long enough to learn the cell's id and interrupt
// it, so that its record says how it ended. Past it the start is abandoned, and the
// daemon interrupts the cell if it starts.
const DaemonStartGrace = 2 * time.Second

// Execute runs code as session's next cell on the daemon and returns its record;
// onOutput, if set, is told each piece of output as it comes. Cancelling ctx interrupts
// the cell, and the record is of how it ended.
//
// The cell is started without waiting (wait_ms 0): this client does the waiting, so
// that ctx's end reaches the daemon as the cell's interrupt. The start outlives ctx by
// DaemonStartGrace at most: a cell started as ctx ended is interrupted by its id.
func (c *Daemon) Execute(ctx context.Context, session, code string, onOutput func(cellID string, out kiln.Output)) (kiln.Record, error) {
	if err := ctx.Err(); err != nil {
		return kiln.Record{}, fmt.Errorf("kiln: daemon: %w", err)
	}
	var r daemonRecord
	resp, err := c.start(ctx, "/v1/sessions/"+url.PathEscape(session)+"/executions", map[string]any{"code": code, "wait_ms": 0}, &r)
	if err != nil {
		return kiln.Record{}, err
	}
	loc := resp.Header.Get("Location")
	if onOutput != nil {
		var shown []kiln.Output
		live, err := c.follow(ctx, loc, r.Cell, func(cell string, o kiln.Output) {
			shown = mergeOutput(shown, o)
			onOutput(cell, o)
		})
		if err != nil && ctx.Err() == nil {
			return kiln.Record{}, err
		}
		if r, err = c.finish(ctx, loc); err != nil {
			return kiln.Record{}, err
		}
		if !live {
			for _, o := range unshown(shown, r.Output) {
				onOutput(r.Cell, o)
			}
		}
		return r.record(session), nil
	}
	if r.Status == "running" {
		if r, err = c.finish(ctx, loc); err != nil {
			return kiln.Record{}, err
		}
	}
	return r.record(session), nil
}

// start posts a cell's start to path and decodes the answer into r. The request
// outlives ctx by DaemonStartGrace at most.
func (c *Daemon) start(ctx context.Context, path string, body any, r *daemonRecord) (*http.Response, error) {
	startCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	answered := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-answered:
			return
		case <-ctx.Done():
		}
		grace := time.NewTimer(DaemonStartGrace)
		defer grace.Stop()
		select {
		case <-answered:
		case <-grace.C:
			abandon()
		}
	}()
	resp, err := c.call(startCtx, "POST", path, body, r)
	close(answered)
	<-watched
	if err != nil && startCtx.Err() != nil {
		return nil, fmt.Errorf("kiln: daemon: the cell's start was not answered within %s of %w", DaemonStartGrace, context.Cause(ctx))
	}
	return resp, err
}

// finish long-polls the execution at loc until it ends; when ctx ends first, it is
// interrupted and the record is of how it ended.
func (c *Daemon) finish(ctx context.Context, loc string) (daemonRecord, error) {
	var r daemonRecord
	for {
		if ctx.Err() != nil {
			_, err := c.call(context.WithoutCancel(ctx), "POST", loc+"/interrupt", nil, &r)
			var p *DaemonError
			if errors.As(err, &p) && p.Code == ProblemNotRunning {
				_, err = c.call(context.WithoutCancel(ctx), "GET", loc, nil, &r)
			}
			return r, err
		}
		_, err := c.call(ctx, "GET", loc+"?wait_ms="+strconv.Itoa(clientPollMS), nil, &r)
		if err != nil && ctx.Err() == nil {
			return r, err
		}
		if err == nil && r.Status != "running" {
			return r, nil
		}
	}
}

// mergeOutput appends o to outputs as a record keeps them: text joined to the text of
// its stream before it, up to a display.
func mergeOutput(outputs []kiln.Output, o kiln.Output) []kiln.Output {
	if n := len(outputs); n > 0 && o.Stream != "display" && outputs[n-1].Stream == o.Stream {
		outputs[n-1].Text += o.Text
		return outputs
	}
	return append(outputs, o)
}

// unshown is what of a record's output, its results aside, comes after shown, the
// prefix of it a reader was shown.
func unshown(shown, output []kiln.Output) []kiln.Output {
	var rest []kiln.Output
	for _, o := range output {
		if o.Stream != "result" {
			rest = mergeOutput(rest, o)
		}
	}
	for i, s := range shown {
		switch {
		case i == len(rest) || s.Stream != rest[i].Stream || !strings.HasPrefix(rest[i].Text, s.Text):
			return rest[i:] // not a prefix of the record: the record from where they part
		case i == len(shown)-1 && s.Stream != "display" && len(s.Text) < len(rest[i].Text):
			return append([]kiln.Output{{Stream: s.Stream, Text: rest[i].Text[len(s.Text):]}}, rest[i+1:]...)
		}
	}
	return rest[len(shown):]
}

// maxOutputLine bounds one line of a daemon's output stream: a display's data, every
// byte escaped as JSON's \u00XX at worst, and room for the rest.
const maxOutputLine = 6*wire.MaxDisplayBytes + 1<<20

// follow tells onOutput each chunk of the output of the execution at loc until it ends;
// live is false when it had ended before, and its output is its record's.
func (c *Daemon) follow(ctx context.Context, loc, cell string, onOutput func(string, kiln.Output)) (live bool, err error) {
	resp, err := c.request(ctx, "GET", loc+"/output", nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, maxOutputLine)
	for lines.Scan() {
		var chunk struct {
			Kind   string            `json:"kind"`
			Live   bool              `json:"live"`
			Stream string            `json:"stream"`
			Text   string            `json:"text"`
			Data   map[string]string `json:"data"`
		}
		if err := json.Unmarshal(lines.Bytes(), &chunk, json.RejectUnknownMembers(false)); err != nil {
			return false, fmt.Errorf("kiln: daemon output: %w", err)
		}
		if chunk.Kind == "end" {
			return chunk.Live, nil
		}
		onOutput(cell, kiln.Output{Stream: chunk.Stream, Text: chunk.Text, Data: chunk.Data})
	}
	if err := lines.Err(); err != nil {
		return true, fmt.Errorf("kiln: daemon output: %w", err)
	}
	return true, errors.New("kiln: daemon output: the stream ended early")
}

// Send records text as an operator input of session, as kiln send does.
func (c *Daemon) Send(ctx context.Context, session, text string) (Input, error) {
	var in Input
	_, err := c.call(ctx, "POST", "/v1/sessions/"+url.PathEscape(session)+"/inputs", map[string]string{"text": text}, &in)
	return in, err
}

// Transcript is the transcript of a session the daemon holds, as a model reads it and
// as the daemon renders it, without the agent's model calls: Journal.WithModelCalls
// places them. A session it does not hold is a DaemonError (session_not_found or
// session_stopped).
func (c *Daemon) Transcript(ctx context.Context, session string) ([]kiln.Message, error) {
	var messages []kiln.Message
	_, err := c.call(ctx, "GET", "/v1/sessions/"+url.PathEscape(session)+"/transcript", nil, &messages)
	return messages, err
}

// Event is one event of a daemon's stream, whole in Raw: a journal entry (Kind "output"
// is a piece of a running cell's output).
type Event struct {
	Seq     int64          `json:"seq"`
	Kind    string         `json:"kind"`
	Session string         `json:"session"`
	Raw     jsontext.Value `json:"-"`
}

// Events follows the durable events after seq — of session, or of every session when
// it is "" — telling fn each until ctx ends or fn fails. follow false ends once caught up.
func (c *Daemon) Events(ctx context.Context, session string, after int64, follow bool, fn func(Event) error) error {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if !follow {
		q.Set("follow", "0")
	}
	return c.events(ctx, session, q, fn)
}

// EventsLive follows session's events after seq as Events does, with the pieces of its
// model calls as they stream between them: events of Kind "model.delta", Seq 0, which a
// resumed stream does not replay (the model_call record holds the whole reply).
func (c *Daemon) EventsLive(ctx context.Context, session string, after int64, fn func(Event) error) error {
	return c.events(ctx, session, url.Values{"after": {strconv.FormatInt(after, 10)}, "deltas": {"1"}}, fn)
}

func (c *Daemon) events(ctx context.Context, session string, q url.Values, fn func(Event) error) error {
	path := "/v1/events"
	if session != "" {
		path = "/v1/sessions/" + url.PathEscape(session) + "/events"
	}
	resp, err := c.request(ctx, "GET", path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 16<<20)
	for lines.Scan() {
		var e Event
		if err := json.Unmarshal(lines.Bytes(), &e, json.RejectUnknownMembers(false)); err != nil {
			return fmt.Errorf("kiln: daemon events: %w", err)
		}
		if e.Kind == "heartbeat" {
			continue
		}
		e.Raw = append(jsontext.Value(nil), lines.Bytes()...)
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return lines.Err()
}

// CancelTurn cancels the running turn of session's agent and says whether one was
// running; the turn ends cancelled.
func (c *Daemon) CancelTurn(ctx context.Context, session string) (bool, error) {
	var reply struct {
		Cancelled bool `json:"cancelled"`
	}
	_, err := c.call(ctx, "POST", "/v1/sessions/"+url.PathEscape(session)+"/turn:cancel", nil, &reply)
	return reply.Cancelled, err
}

// Decision is how a cell held for an operator's decision (execution.review) ended.
type Decision struct {
	Turn      int64     `json:"turn"`
	Cell      string    `json:"cell"`
	Decision  string    `json:"decision"` // approved, rejected, timeout, cancelled, abandoned
	Reason    string    `json:"reason,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
}

// Decide approves (the cell runs) or rejects (it never runs; the model reads the
// rejection as its result) the agent's cell held as execution eid, <session>:c-N,
// saying why (reason may be ""). A cell not held is a DaemonError of code not_held.
func (c *Daemon) Decide(ctx context.Context, eid string, approve bool, reason string) (Decision, error) {
	verb := "reject"
	if approve {
		verb = "approve"
	}
	var d Decision
	_, err := c.call(ctx, "POST", "/v1/executions/"+url.PathEscape(eid)+"/"+verb, map[string]string{"reason": reason}, &d)
	return d, err
}

// Fold is the record of a fold or a reset the operator asked for, as the session's
// events carry it (kind fold).
type Fold struct {
	// Turn is the last turn that ran before it.
	Turn int64 `json:"turn"`
	// Covers counts the messages of the conversation it replaced.
	Covers int `json:"covers_messages"`
	// Summary replaces them; "" after a reset.
	Summary string `json:"summary"`
	// HeaderAfter is the digest of the instruction text the next request carries.
	HeaderAfter string `json:"header_digest_after,omitzero"`
	// TokensBefore is the conversation's size before it, in tokens.
	TokensBefore int64 `json:"tokens_before"`
	// Reset says the conversation was dropped, not summarized: a new transcript segment.
	Reset bool `json:"reset,omitzero"`
}

// Fold folds the conversation of session's agent now, between turns (after the turn
// running): one model call summarizes it, and the summary replaces it. An empty
// conversation is a DaemonError of code nothing_to_fold; a fold that failed (recorded,
// the conversation kept), of code fold_failed.
func (c *Daemon) Fold(ctx context.Context, session string) (Fold, error) {
	var f Fold
	_, err := c.call(ctx, "POST", "/v1/sessions/"+url.PathEscape(session)+"/fold", nil, &f)
	return f, err
}

// Reset begins a new transcript segment of session's agent, between turns: its
// conversation and summary are dropped without a model call, and the next turn starts
// from the instructions and its inputs; the durable record is kept.
func (c *Daemon) Reset(ctx context.Context, session string) (Fold, error) {
	var f Fold
	_, err := c.call(ctx, "POST", "/v1/sessions/"+url.PathEscape(session)+"/reset", nil, &f)
	return f, err
}

// ResumeTurn resumes the last turn of session's agent, which ended host_died or
// overflow: an input saying so wakes the agent. It returns the turn and the input's
// event id; a last turn that ended otherwise is a DaemonError of code not_resumable.
func (c *Daemon) ResumeTurn(ctx context.Context, session string) (turn, input int64, err error) {
	var reply struct {
		Turn  int64 `json:"turn"`
		Input int64 `json:"input"`
	}
	_, err = c.call(ctx, "POST", "/v1/sessions/"+url.PathEscape(session)+"/turn:resume", nil, &reply)
	return reply.Turn, reply.Input, err
}
