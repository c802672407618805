// Package mcpserver is kiln's MCP server over a daemon's sessions, with the official Go
// SDK: tools built around durable execution ids (execute answers within wait_ms, with
// status running and the id when the cell goes on; wait and interrupt take the id),
// output bounded with the dropped bytes counted, records and display items (images
// among them) as kiln:// resources, and progress notifications while a cell runs. It serves stdio (kiln mcp) and the
// daemon's streamable HTTP endpoint /mcp.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/serve"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Waits a tool call may ask for, in milliseconds: agent clients cut calls off at 5 to
// 60 s, so a call answers well within that and says the cell still runs.
const (
	DefaultWaitMS = 10000
	MaxWaitMS     = 50000
)

// MaxTailBytes bounds each of stdout_tail and stderr_tail in a tool's answer; the bytes
// left out are counted in truncated_bytes, and the whole record is a resource.
const MaxTailBytes = 8192

// MaxPlainBytes bounds the text/plain of each display item in a tool's answer; the
// bytes left out are counted in truncated_bytes, and the item is a resource.
const MaxPlainBytes = 1024

// ProgressInterval is how often a call waiting on a running cell notifies progress.
const ProgressInterval = time.Second

// SessionTimeout closes an HTTP MCP session idle this long (no request served, no
// stream open), unless Options set another: many clients leave without closing theirs.
const SessionTimeout = 2 * time.Minute

// Options configure the server.
type Options struct {
	// RunProgram runs a one-shot program; nil leaves run_program out.
	RunProgram func(ctx context.Context, code string, limits api.ProgramLimits) ([]byte, error)
	Logger     *slog.Logger // nil discards
	// SessionTimeout closes an HTTP MCP session idle this long; default SessionTimeout.
	SessionTimeout time.Duration
}

// handlers holds the tools' state: the daemon.
type handlers struct {
	d    *serve.Daemon
	opts Options
}

// Server is kiln's MCP server over a daemon's sessions. Its tool calls end when the
// server stops (Close, or the end of Run's context) or, over HTTP, when their session
// is deleted.
type Server struct {
	*mcp.Server
	calls calls
	posts posts
	idle  idle
}

// New returns the MCP server of d's sessions.
func New(d *serve.Daemon, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &handlers{d: d, opts: opts}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = SessionTimeout
	}
	server := &Server{}
	server.idle = idle{timeout: opts.SessionTimeout, exists: server.exists, close: server.closeSession}
	srv := mcp.NewServer(&mcp.Implementation{Name: "kiln", Version: "1"}, &mcp.ServerOptions{
		Logger: opts.Logger,
		Instructions: "kiln runs Python cells in persistent sessions. Open a session, then execute code in it. " +
			"execute answers within wait_ms: a cell still running answers status running with its execution_id; " +
			"call wait with that id (never an id you were not given), or interrupt it.",
	})
	server.Server = srv
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}
	addTool(server, &mcp.Tool{Name: "session_open", Description: "Open a session (a persistent Python namespace), or attach to it if it is open. python, cwd and limits set the interpreter, the directory cells run in and the session's limits (memory, CPU and wall time per cell, processes); sandbox and network confine it; route the kiln.toml route of its agent; instructions or instructions_file its own instruction text — as the HTTP API's POST /v1/sessions does."}, s.sessionOpen)
	addTool(server, &mcp.Tool{Name: "session_list", Description: "List the sessions the daemon holds.", Annotations: readOnly}, s.sessionList)
	addTool(server, &mcp.Tool{Name: "session_close", Description: "Stop a session: a running cell is interrupted, the namespace ends."}, s.sessionClose)
	addTool(server, &mcp.Tool{Name: "execute", Description: "Run Python code as the session's next cell. Answers within wait_ms (default 10000, at most 50000); a cell still running answers status running with its execution_id for wait or interrupt."}, s.execute)
	addTool(server, &mcp.Tool{Name: "wait", Description: "Wait up to wait_ms for a running execution and return its state.", Annotations: readOnly}, s.wait)
	addTool(server, &mcp.Tool{Name: "interrupt", Description: "Interrupt a running execution and return how it ended: interrupted, or hard-stopped with its namespace lost."}, s.interrupt)
	addTool(server, &mcp.Tool{Name: "record", Description: "The whole durable record of an execution: its code and full output.", Annotations: readOnly}, s.record)
	addTool(server, &mcp.Tool{Name: "held", Description: "List the cells a session's agent wrote that are held for the operator's decision before they run (kiln.toml's [agent] review, or the policy's execution.review).", Annotations: readOnly}, s.held)
	addTool(server, &mcp.Tool{Name: "model_deltas", Description: "Read the pieces of the agents' model calls (text and code) as they stream: those published after cursor (empty: from now), waiting up to wait_ms for the first. Call again with the cursor answered. They are not records: the model call's record holds the whole reply.", Annotations: readOnly}, s.deltas)
	addTool(server, &mcp.Tool{Name: "approve", Description: "Approve a held cell of a session's agent: it runs."}, s.approve)
	addTool(server, &mcp.Tool{Name: "reject", Description: "Reject a held cell of a session's agent: it never runs, and the model reads the reason as its result."}, s.reject)
	if opts.RunProgram != nil {
		addTool(server, &mcp.Tool{Name: "run_program", Description: "Run a one-shot Python program (the body of an async function; its return value is the result) in a fresh, bounded interpreter.",
			InputSchema: programSchema()}, s.runProgram)
	}
	srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "execution", MIMEType: "application/json",
		URITemplate: "kiln://sessions/{session}/executions/{cell}",
		Description: "An execution's durable record, its full output included; display items are links."}, s.read)
	srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "display",
		URITemplate: "kiln://sessions/{session}/executions/{cell}/display/{n}",
		Description: "A display item of an execution (n counts from 0): an image's bytes, or its richest text, in its MIME type."}, s.read)
	return server
}

// addTool adds a tool to s whose calls end when s ends them (calls.enter).
func addTool[In, Out any](s *Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(s.Server, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		ctx, done, err := s.calls.enter(ctx, req.Session)
		if err != nil {
			var none Out
			return nil, none, err
		}
		defer done()
		return h(ctx, req, in)
	})
}

// SessionInput opens a session: the same settings as the HTTP API's POST /v1/sessions.
type SessionInput struct {
	Session string         `json:"session,omitempty" jsonschema:"the session's id; a fresh one when empty"`
	Python  string         `json:"python,omitempty" jsonschema:"the interpreter; default the daemon's"`
	Cwd     string         `json:"cwd,omitempty" jsonschema:"the directory cells run in; default the daemon's workspace"`
	Limits  limits.Session `json:"limits,omitzero" jsonschema:"idle_timeout_ms, interrupt_grace_ms, start_timeout_ms, tool_timeout_ms; memory_bytes (each generation's memory), cpu_seconds (each cell's CPU time), wall_ms (each cell's wall clock), max_processes (tasks, under a confining sandbox); 0 takes the daemon's"`
	Route   string         `json:"route,omitempty" jsonschema:"the kiln.toml route of the session's agent; default the [agent] route"`
	// Sandbox and Network confine the session, as POST /v1/sessions's do.
	Sandbox string `json:"sandbox,omitempty" jsonschema:"workspace, strict or none, the first two optionally :best-effort; default the daemon's; a profile the kernel cannot give is refused"`
	Network string `json:"network,omitempty" jsonschema:"host, none, or TCP ports such as 80,443; default the daemon's"`
	// Instructions and InstructionsFile give the session's own instruction source.
	Instructions     string `json:"instructions,omitempty" jsonschema:"the text of the session's own instructions, after the workspace's"`
	InstructionsFile string `json:"instructions_file,omitempty" jsonschema:"a file holding the session's own instructions, relative to the daemon's workspace"`
}

// SessionInfo is what a tool says of a session.
type SessionInfo struct {
	Session    string `json:"session"`
	State      string `json:"state"`
	Generation string `json:"generation"`
	Running    string `json:"running"`
	StopReason string `json:"stop_reason,omitempty"`
	// Sandbox is what confines the live generation, absent when none is live.
	Sandbox *sandbox.Applied `json:"sandbox,omitempty"`
}

func info(in serve.Info) SessionInfo {
	return SessionInfo{Session: in.ID, State: in.State, Generation: in.Generation, Running: in.Running, StopReason: in.StopReason,
		Sandbox: in.Sandbox}
}

func (s *handlers) sessionOpen(ctx context.Context, _ *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, SessionInfo, error) {
	id := in.Session
	if id == "" {
		id = api.NewSessionID(time.Now())
	}
	want := serve.Config{ID: id, Python: in.Python, Cwd: in.Cwd, Limits: in.Limits, Route: in.Route,
		Instructions: in.Instructions, InstructionsFile: in.InstructionsFile, Sandbox: in.Sandbox, Network: in.Network}
	sess, err := s.d.Create(ctx, want)
	var differ *serve.SettingsError
	switch {
	case errors.As(err, &differ):
		err = fmt.Errorf("%s: close it first to open it with these settings", differ.Detail())
	case errors.Is(err, serve.ErrExists):
		if sess, err = s.d.Session(id); err == nil {
			err = sameAgent(sess.Info(), want)
		}
	}
	if err != nil {
		return nil, SessionInfo{}, err
	}
	return nil, info(sess.Info()), nil
}

// sameAgent refuses to attach to the open session of in with the route or instructions
// of its agent want names otherwise; the daemon refuses other settings itself
// (serve.SettingsError).
func sameAgent(in serve.Info, want serve.Config) error {
	have := in.Config
	var differs []string
	if want.Route != "" && want.Route != have.Route {
		differs = append(differs, fmt.Sprintf("route %q, not %q", have.Route, want.Route))
	}
	if want.Instructions != "" && want.Instructions != have.Instructions ||
		want.InstructionsFile != "" && !sameFile(want.InstructionsFile, have.InstructionsFile) {
		differs = append(differs, "other instructions")
	}
	if len(differs) > 0 {
		return fmt.Errorf("session %s is open with %s: close it first to open it with these settings", in.ID, strings.Join(differs, ", "))
	}
	return nil
}

// sameFile says whether the file a request names, absolute or relative to the
// workspace, is the absolute file have.
func sameFile(want, have string) bool {
	if filepath.IsAbs(want) {
		return filepath.Clean(want) == have
	}
	return strings.HasSuffix(have, string(filepath.Separator)+filepath.Clean(want))
}

// SessionList is the sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

func (s *handlers) sessionList(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, SessionList, error) {
	out := SessionList{Sessions: []SessionInfo{}}
	for _, in := range s.d.Sessions() {
		out.Sessions = append(out.Sessions, info(in))
	}
	return nil, out, nil
}

// SessionRef names a session.
type SessionRef struct {
	Session string `json:"session" jsonschema:"the session's id"`
}

func (s *handlers) sessionClose(_ context.Context, _ *mcp.CallToolRequest, in SessionRef) (*mcp.CallToolResult, SessionInfo, error) {
	sess, err := s.d.Session(in.Session)
	if err != nil {
		return nil, SessionInfo{}, err
	}
	if err := sess.Stop("closed by an MCP client"); err != nil {
		return nil, SessionInfo{}, err
	}
	return nil, info(sess.Info()), nil
}

// ExecuteInput runs a cell.
type ExecuteInput struct {
	Session string `json:"session" jsonschema:"the session's id (session_open)"`
	Code    string `json:"code" jsonschema:"Python source of the cell; its final expression's repr is value_repr"`
	WaitMS  *int64 `json:"wait_ms,omitempty" jsonschema:"how long to wait for the cell, 0..50000 ms; default 10000"`
}

// Execution is an execution as a tool answers it: the members of a cell's record
// (docs/cli.md), its output as tails, and links to the whole record and its displays.
type Execution struct {
	ExecutionID string `json:"execution_id"`
	Session     string `json:"session"`
	ID          string `json:"id"` // the cell's id, c-N
	// Status is running, ok, error, interrupted, yielded or failed.
	Status     string `json:"status"`
	Generation string `json:"generation"`
	// StartedAt is when the host recorded the cell's start; DurationMs is from it to
	// the recorded end, null while the cell runs.
	StartedAt  time.Time `json:"started_at"`
	DurationMs *int64    `json:"duration_ms"`
	ValueRepr  string    `json:"value_repr"` // the final expression's repr; "" when none
	StdoutTail string    `json:"stdout_tail"`
	StderrTail string    `json:"stderr_tail"`
	// TruncatedBytes counts the output bytes this answer does not carry: those the
	// cell's record dropped and those cut from the tails here.
	TruncatedBytes int64  `json:"truncated_bytes"`
	Error          string `json:"error"`
	// Exception is what the cell raised, in parts, each cut to its tail; null if nothing.
	Exception     *wire.Exception `json:"exception"`
	NamespaceLost bool            `json:"namespace_lost"`
	// Limit is the limit that ended the cell: memory, cpu_seconds or timeout; absent if
	// none did.
	Limit          string `json:"limit,omitempty"`
	FreshNamespace bool   `json:"fresh_namespace"`
	Record         string `json:"record"` // the kiln:// resource of the whole record
	// Displays are the cell's display items, as links; none while it runs.
	Displays []DisplayRef `json:"displays"`
}

// DisplayRef is a display item as a tool answers it: its resource, never its bytes.
type DisplayRef struct {
	Stream    string `json:"stream"` // "display", as the record's output says
	Index     int    `json:"index"`
	Link      string `json:"link"`      // kiln://sessions/{sid}/executions/{cell}/display/{n}
	MIMEType  string `json:"mime_type"` // what reading the link returns
	TextPlain string `json:"text_plain"`
}

// displayURI is the resource of a display item of an execution.
func displayURI(session, cell string, n int) string {
	return fmt.Sprintf("%s/display/%d", recordURI(session, cell), n)
}

// displayRefs are rec's display items as links, each text/plain cut to MaxPlainBytes,
// and how many bytes were cut.
func displayRefs(rec serve.Record) ([]DisplayRef, int64) {
	refs := []DisplayRef{}
	var cutTotal int64
	for _, d := range rec.Displays() {
		plain, cut := tail(d.Plain, MaxPlainBytes)
		cutTotal += int64(cut)
		refs = append(refs, DisplayRef{Stream: wire.StreamDisplay, Index: d.Index,
			Link: displayURI(rec.Session, rec.Cell, d.Index), MIMEType: d.MIMEType, TextPlain: plain})
	}
	return refs, cutTotal
}

// recordURI is the resource of an execution's record.
func recordURI(session, cell string) string {
	return "kiln://sessions/" + session + "/executions/" + cell
}

// answer is rec as a tool answers it, with a short text copy and a link to the record.
func answer(rec serve.Record) (*mcp.CallToolResult, Execution) {
	x := Execution{ExecutionID: rec.ID, Session: rec.Session, ID: rec.Cell, Status: rec.Status, Generation: rec.Generation,
		StartedAt: rec.StartedAt.UTC(), TruncatedBytes: rec.TruncatedBytes, NamespaceLost: rec.NamespaceLost,
		Limit: rec.Limit, FreshNamespace: rec.FreshNamespace, Record: recordURI(rec.Session, rec.Cell)}
	if rec.EndedAt != nil {
		ms := max(rec.EndedAt.UnixMilli()-rec.StartedAt.UnixMilli(), 0)
		x.DurationMs = &ms
	}
	if rec.Error != nil {
		x.Error = *rec.Error
	}
	var outputs []struct {
		Stream string `json:"stream"`
		Text   string `json:"text"`
	}
	if len(rec.Output) > 0 {
		json.Unmarshal(rec.Output, &outputs, json.RejectUnknownMembers(false))
	}
	var stdout, stderr strings.Builder
	for _, o := range outputs {
		switch o.Stream {
		case "result":
			x.ValueRepr = o.Text
		case "stderr":
			stderr.WriteString(o.Text)
		default:
			stdout.WriteString(o.Text)
		}
	}
	var cut int
	x.StdoutTail, cut = tail(stdout.String(), MaxTailBytes)
	x.TruncatedBytes += int64(cut)
	x.StderrTail, cut = tail(stderr.String(), MaxTailBytes)
	x.TruncatedBytes += int64(cut)
	x.Error, cut = tail(x.Error, MaxTailBytes)
	x.TruncatedBytes += int64(cut)
	var exc wire.Exception
	if len(rec.Exception) > 0 && json.Unmarshal(rec.Exception, &exc, json.RejectUnknownMembers(false)) == nil && exc.Type != "" {
		for _, part := range []*string{&exc.Value, &exc.Traceback} {
			*part, cut = tail(*part, MaxTailBytes)
			x.TruncatedBytes += int64(cut)
		}
		x.Exception = &exc
	}
	var plainCut int64
	x.Displays, plainCut = displayRefs(rec)
	x.TruncatedBytes += plainCut

	var text strings.Builder
	fmt.Fprintf(&text, "%s %s", x.ExecutionID, x.Status)
	if x.Status == "running" {
		text.WriteString(": still running; call wait or interrupt with this execution_id")
	}
	for _, part := range []string{x.StdoutTail, x.StderrTail, x.Error} {
		if part != "" {
			text.WriteString("\n" + strings.TrimRight(part, "\n"))
		}
	}
	if x.ValueRepr != "" {
		text.WriteString("\n" + x.ValueRepr)
	}
	for _, d := range x.Displays {
		fmt.Fprintf(&text, "\n[display %d, %s: %s] %s", d.Index, d.MIMEType, d.Link, d.TextPlain)
	}
	if x.TruncatedBytes > 0 {
		fmt.Fprintf(&text, "\n[%d bytes of output not shown; the record has what was kept]", x.TruncatedBytes)
	}
	if x.NamespaceLost {
		text.WriteString("\n[the namespace was lost with this cell; the next cell starts empty]")
	}
	if x.FreshNamespace {
		text.WriteString("\n[this cell ran in a new, empty namespace: the earlier one was lost]")
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.String()}}}
	if x.TruncatedBytes > 0 {
		res.Content = append(res.Content, &mcp.ResourceLink{URI: x.Record, Name: x.ExecutionID, MIMEType: "application/json",
			Description: "the whole record of " + x.ExecutionID})
	}
	for _, d := range x.Displays {
		res.Content = append(res.Content, &mcp.ResourceLink{URI: d.Link, Name: fmt.Sprintf("%s display %d", x.ExecutionID, d.Index),
			MIMEType: d.MIMEType, Description: d.TextPlain})
	}
	return res, x
}

// tail is the last at most n bytes of s, starting on a character boundary, and how
// many bytes were cut.
func tail(s string, n int) (string, int) {
	if len(s) <= n {
		return s, 0
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:], i
}

// waitOf checks a wait in milliseconds.
func waitOf(ms *int64) (time.Duration, error) {
	if ms == nil {
		return DefaultWaitMS * time.Millisecond, nil
	}
	if *ms < 0 || *ms > MaxWaitMS {
		return 0, fmt.Errorf("wait_ms must be 0..%d, got %d", MaxWaitMS, *ms)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func (s *handlers) execute(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, Execution, error) {
	wait, err := waitOf(in.WaitMS)
	if err != nil {
		return nil, Execution{}, err
	}
	sess, err := s.d.Session(in.Session)
	if err != nil {
		return nil, Execution{}, err
	}
	x, err := sess.Execute(ctx, in.Code, "")
	if err != nil {
		return nil, Execution{}, err
	}
	return s.await(ctx, req, sess, x, wait)
}

// await waits up to wait for x, notifying progress with its output as it comes, and
// answers its record as it then is.
func (s *handlers) await(ctx context.Context, req *mcp.CallToolRequest, sess *serve.Session, x *serve.Execution, wait time.Duration) (*mcp.CallToolResult, Execution, error) {
	if token := req.Params.GetProgressToken(); token != nil && wait > 0 {
		began := time.Now()
		s.progress(ctx, req, token, x, wait)
		wait = max(0, wait-time.Since(began)) // one wait in all, the progress's part of it
	}
	rec, err := sess.Wait(ctx, x, wait)
	if err != nil {
		return nil, Execution{}, err
	}
	res, out := answer(rec)
	return res, out, nil
}

// progress notifies the caller each ProgressInterval, and at each piece of output,
// until x ends or wait passes.
func (s *handlers) progress(ctx context.Context, req *mcp.CallToolRequest, token any, x *serve.Execution, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(ProgressInterval)
	defer tick.Stop()
	chunks := make(chan string, 1)
	go func() { // the output as it comes, a piece at a time, bounded
		defer close(chunks)
		from := 0
		for {
			got, ended, _, err := x.Output(ctx, from)
			if err != nil || ended && len(got) == 0 {
				return
			}
			var b strings.Builder
			for _, c := range got {
				b.WriteString(c.Text)
				if c.Stream == wire.StreamDisplay {
					b.WriteString(c.Data[wire.MIMEPlain] + "\n")
				}
				from = c.Index + 1
			}
			text, _ := tail(b.String(), 1024)
			select {
			case chunks <- text:
			case <-ctx.Done():
				return
			}
			if ended {
				return
			}
		}
	}()
	n := 0.0
	notify := func(msg string) {
		n++
		req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
	}
	for {
		select {
		case <-x.Done():
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			notify("running")
		case text, ok := <-chunks:
			if !ok {
				chunks = nil
				continue
			}
			notify(text)
		}
	}
}

// ExecutionRef names an execution.
type ExecutionRef struct {
	ExecutionID string `json:"execution_id" jsonschema:"the id execute answered, <session>:c-N"`
}

// WaitInput waits for an execution.
type WaitInput struct {
	ExecutionID string `json:"execution_id" jsonschema:"the id execute answered, <session>:c-N"`
	WaitMS      *int64 `json:"wait_ms,omitempty" jsonschema:"how long to wait, 0..50000 ms; default 10000"`
}

// execution finds the execution id names.
func (s *handlers) execution(ctx context.Context, id string) (*serve.Session, *serve.Execution, error) {
	sid, cell, err := serve.ParseExecutionID(id)
	if err != nil {
		return nil, nil, err
	}
	sess, err := s.d.Session(sid)
	if err != nil {
		return nil, nil, err
	}
	x, err := sess.Execution(ctx, cell)
	return sess, x, err
}

func (s *handlers) wait(ctx context.Context, req *mcp.CallToolRequest, in WaitInput) (*mcp.CallToolResult, Execution, error) {
	wait, err := waitOf(in.WaitMS)
	if err != nil {
		return nil, Execution{}, err
	}
	sess, x, err := s.execution(ctx, in.ExecutionID)
	if err != nil {
		return nil, Execution{}, err
	}
	return s.await(ctx, req, sess, x, wait)
}

func (s *handlers) interrupt(ctx context.Context, _ *mcp.CallToolRequest, in ExecutionRef) (*mcp.CallToolResult, Execution, error) {
	sess, x, err := s.execution(ctx, in.ExecutionID)
	if err != nil {
		return nil, Execution{}, err
	}
	if err := sess.Interrupt(ctx, x); err != nil && !errors.Is(err, serve.ErrNotRunning) {
		return nil, Execution{}, err
	}
	rec, err := sess.Record(ctx, x.Cell())
	if err != nil {
		return nil, Execution{}, err
	}
	res, out := answer(rec)
	return res, out, nil
}

// FullRecord is an execution's whole durable record.
type FullRecord struct {
	Record map[string]any `json:"record"`
}

func (s *handlers) record(ctx context.Context, _ *mcp.CallToolRequest, in ExecutionRef) (*mcp.CallToolResult, FullRecord, error) {
	sess, x, err := s.execution(ctx, in.ExecutionID)
	if err != nil {
		return nil, FullRecord{}, err
	}
	data, err := s.recordJSON(ctx, sess, x.Cell())
	if err != nil {
		return nil, FullRecord{}, err
	}
	var out FullRecord
	err = json.Unmarshal(data, &out.Record)
	return nil, out, err
}

// recordJSON is the record of sess's cell as JSON, each display item of its output a
// DisplayRef in place of its bundle.
func (s *handlers) recordJSON(ctx context.Context, sess *serve.Session, cell string) (jsontext.Value, error) {
	rec, err := sess.Record(ctx, cell)
	if err != nil {
		return nil, err
	}
	if refs, _ := displayRefs(rec); len(refs) > 0 {
		var outputs []any
		if err := json.Unmarshal(rec.Output, &outputs); err != nil {
			return nil, fmt.Errorf("mcpserver: record %s: %w", rec.ID, err)
		}
		n := 0
		for i, o := range outputs {
			if m, ok := o.(map[string]any); ok && m["stream"] == wire.StreamDisplay && n < len(refs) {
				outputs[i] = refs[n]
				n++
			}
		}
		if rec.Output, err = json.Marshal(outputs, json.Deterministic(true)); err != nil {
			return nil, err
		}
	}
	return json.Marshal(rec, json.Deterministic(true))
}

// read reads a kiln:// resource: an execution's record, or one of its display items.
func (s *handlers) read(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, "kiln://sessions/")
	sid, cell, ok2 := strings.Cut(rest, "/executions/")
	if !ok || !ok2 {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	sess, err := s.d.Session(sid)
	if err != nil {
		return nil, notFound(uri, err)
	}
	cell, index, isDisplay := strings.Cut(cell, "/display/")
	if !isDisplay {
		data, err := s.recordJSON(ctx, sess, cell)
		if err != nil {
			return nil, notFound(uri, err)
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
	}
	n, err := serve.ParseDisplayIndex(index)
	if err != nil {
		return nil, notFound(uri, err)
	}
	d, err := sess.Display(ctx, cell, n)
	if err != nil {
		return nil, notFound(uri, err)
	}
	body, err := d.Content()
	if err != nil {
		return nil, err
	}
	c := &mcp.ResourceContents{URI: uri, MIMEType: d.MIMEType}
	if _, binary := wire.DisplayMIME(d.MIMEType); binary {
		c.Blob = body
	} else {
		c.Text = string(body)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}

// notFound is err as the resource-not-found error of uri, saying why, when err says
// there is no such session, execution or display item; else err.
func notFound(uri string, err error) error {
	if !errors.Is(err, serve.ErrNoSession) && !errors.Is(err, serve.ErrNoCell) && !errors.Is(err, serve.ErrNoDisplay) {
		return err
	}
	data, _ := json.Marshal(map[string]string{"uri": uri, "reason": err.Error()})
	return &jsonrpc.Error{Code: mcp.CodeResourceNotFound, Message: "resource not found: " + err.Error(), Data: data}
}

// ProgramInput runs a program.
type ProgramInput struct {
	Code   string            `json:"code" jsonschema:"the program: the body of an async function; what it returns is the result"`
	Limits api.ProgramLimits `json:"limits,omitzero"`
}

// programSchema is run_program's input schema: ProgramInput's, with every limit
// optional, as a zero one is (it takes the runner's default).
func programSchema() *jsonschema.Schema {
	schema, err := jsonschema.For[ProgramInput](nil)
	if err != nil {
		panic("mcpserver: the schema of ProgramInput: " + err.Error()) // a fixed type's
	}
	schema.Properties["limits"].Required = nil
	return schema
}

// ProgramResult is a program's result, as kiln run --json prints it.
type ProgramResult struct {
	Result map[string]any `json:"result"`
}

func (s *handlers) runProgram(ctx context.Context, _ *mcp.CallToolRequest, in ProgramInput) (*mcp.CallToolResult, ProgramResult, error) {
	data, err := s.opts.RunProgram(ctx, in.Code, in.Limits)
	if err != nil {
		return nil, ProgramResult{}, err
	}
	var out ProgramResult
	err = json.Unmarshal(data, &out.Result)
	return nil, out, err
}
