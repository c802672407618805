// Package api is kiln's HTTP API over a daemon's sessions: JSON requests read strictly,
// application/problem+json errors with a stable code, executions that answer within a
// wait or hand back a Location to long-poll, and each session's durable events as NDJSON
// or server-sent events that resume, with no gap, from the last sequence a client saw.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/serve"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
)

// Waits a client may ask for, in milliseconds.
const (
	DefaultWaitMS = 30000  // how long an execution request waits for the cell by default
	MaxWaitMS     = 300000 // the longest wait a request may ask for
)

// DefaultHeartbeat is how often an idle event stream is sent a heartbeat.
const DefaultHeartbeat = 15 * time.Second

// Options configure the API.
type Options struct {
	// Token, when set, is the bearer token every request must carry, and the
	// request's Host must be a loopback name or one of AllowHosts.
	Token      string
	AllowHosts []string
	Heartbeat  time.Duration // default DefaultHeartbeat
	Logger     *slog.Logger  // nil discards
	// RunProgram runs a one-shot program and returns its result as JSON; an error
	// wrapping ErrProgramInvalid is the caller's. Nil leaves /v1/programs:run out.
	RunProgram func(ctx context.Context, code string, limits ProgramLimits) ([]byte, error)
	// MCP, when set, is served at /mcp: the MCP server's streamable HTTP endpoint.
	MCP http.Handler
	// Peers are the daemon's peers, which GET /v1/sessions/{sid}/peers shows; nil
	// shows none.
	Peers *peer.Service
	// Streams counts the streams served, against MaxStreams: one counter for every
	// handler of a daemon (its socket's and its TCP listener's). Nil gives the handler
	// a counter of its own.
	Streams *atomic.Int64
}

// ErrProgramInvalid is a program or limits a runner refuses.
var ErrProgramInvalid = errors.New("api: invalid program")

// ErrTooManyPrograms is a program refused because the runner runs its most at once.
var ErrTooManyPrograms = errors.New("api: too many programs")

// ProgramLimits bound a program run; zero fields take the runner's defaults.
type ProgramLimits struct {
	CPUSeconds    int   `json:"cpu_seconds"`
	WallMS        int64 `json:"wall_ms"`
	MemoryBytes   int64 `json:"memory_bytes"`
	MaxLogBytes   int   `json:"max_log_bytes"`
	MaxValueBytes int   `json:"max_value_bytes"`
	MaxProcesses  int   `json:"max_processes"`
}

// api serves one daemon.
type api struct {
	d    *serve.Daemon
	opts Options
	log  *slog.Logger

	streams   *atomic.Int64 // streams being served, by every handler of the daemon
	longPolls atomic.Int64  // requests waiting for a cell to end, by this handler
}

// New returns the API's handler over d.
func New(d *serve.Daemon, opts Options) http.Handler {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Streams == nil {
		opts.Streams = new(atomic.Int64)
	}
	a := &api{d: d, opts: opts, log: opts.Logger, streams: opts.Streams}
	mux := http.NewServeMux()
	for _, rt := range a.routes() {
		allow := allowed(rt.methods)
		mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			h := rt.methods[r.Method]
			if h == nil && r.Method == http.MethodHead {
				h = rt.methods[http.MethodGet]
			}
			if h == nil {
				w.Header().Set("Allow", allow)
				writeProblem(w, problem(http.StatusMethodNotAllowed, CodeMethod,
					fmt.Sprintf("%s does not take %s; it takes %s", r.URL.Path, r.Method, allow)))
				return
			}
			h(w, r)
		})
	}
	if opts.MCP != nil {
		mux.Handle("/mcp", opts.MCP)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, problem(http.StatusNotFound, CodeNotFound, "no route "+r.URL.Path))
	})
	if opts.Token == "" {
		return drainDeadline(mux)
	}
	return drainDeadline(hostCheck(opts.AllowHosts, bearer(opts.Token, mux)))
}

// DrainTimeout bounds what net/http reads, once a handler has returned, of a request
// body the handler left unread: it reads up to 256 KiB of it, to keep the connection,
// with no deadline of its own, so a client sending a body slowly to a route that reads
// none, or to a refusal, would hold the connection (and the response) for as long as it
// liked.
const DrainTimeout = 2 * time.Second

// drainDeadline sets DrainTimeout on what is read of a request's body after next.
func drainDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if r.ContentLength != 0 { // a body, or one of unknown length (-1)
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(DrainTimeout))
		}
	})
}

// route is one path of the API and its handlers by method.
type route struct {
	pattern string
	methods map[string]http.HandlerFunc
}

// allowed lists the methods of handlers, HEAD with GET, sorted: a 405's Allow header.
func allowed(handlers map[string]http.HandlerFunc) string {
	methods := slices.Collect(maps.Keys(handlers))
	if handlers[http.MethodGet] != nil && handlers[http.MethodHead] == nil {
		methods = append(methods, http.MethodHead)
	}
	slices.Sort(methods)
	return strings.Join(methods, ", ")
}

// routes are the API's paths, as the OpenAPI document describes them.
func (a *api) routes() []route {
	rs := []route{
		{"/v1/sessions", map[string]http.HandlerFunc{"GET": a.listSessions, "POST": a.createSession}},
		{"/v1/sessions/{sid}", map[string]http.HandlerFunc{"GET": a.getSession, "DELETE": a.stopSession}},
		{"/v1/sessions/{sid}/executions", map[string]http.HandlerFunc{"POST": a.execute}},
		{"/v1/sessions/{sid}/inputs", map[string]http.HandlerFunc{"POST": a.input}},
		{"/v1/sessions/{sid}/turn:cancel", map[string]http.HandlerFunc{"POST": a.cancelTurn}},
		{"/v1/sessions/{sid}/events", map[string]http.HandlerFunc{"GET": a.sessionEvents}},
		{"/v1/sessions/{sid}/transcript", map[string]http.HandlerFunc{"GET": a.transcript}},
		{"/v1/sessions/{sid}/peers", map[string]http.HandlerFunc{"GET": a.peers}},
		{"/v1/sessions/{sid}/files/{path...}", map[string]http.HandlerFunc{"GET": a.getFile, "PUT": a.putFile}},
		{"/v1/sessions:prune", map[string]http.HandlerFunc{"POST": a.prune}},
		{"/v1/executions/{eid}", map[string]http.HandlerFunc{"GET": a.getExecution}},
		{"/v1/executions/{eid}/interrupt", map[string]http.HandlerFunc{"POST": a.interrupt}},
		{"/v1/executions/{eid}/approve", map[string]http.HandlerFunc{"POST": a.approve}},
		{"/v1/executions/{eid}/reject", map[string]http.HandlerFunc{"POST": a.reject}},
		{"/v1/sessions/{sid}/held", map[string]http.HandlerFunc{"GET": a.held}},
		{"/v1/sessions/{sid}/turn:resume", map[string]http.HandlerFunc{"POST": a.resumeTurn}},
		{"/v1/sessions/{sid}/fold", map[string]http.HandlerFunc{"POST": a.fold}},
		{"/v1/sessions/{sid}/reset", map[string]http.HandlerFunc{"POST": a.reset}},
		{"/v1/executions/{eid}/output", map[string]http.HandlerFunc{"GET": a.output}},
		{"/v1/executions/{eid}/display/{n}", map[string]http.HandlerFunc{"GET": a.display}},
		{"/v1/events", map[string]http.HandlerFunc{"GET": a.allEvents}},
		{"/v1/maintenance", map[string]http.HandlerFunc{"GET": a.listWorkItems}},
		{"/v1/orientation", map[string]http.HandlerFunc{"GET": a.orientation}},
		{"/v1/openapi.json", map[string]http.HandlerFunc{"GET": serveOpenAPI}},
	}
	if a.opts.RunProgram != nil {
		rs = append(rs, route{"/v1/programs:run", map[string]http.HandlerFunc{"POST": a.runProgram}})
	}
	return rs
}

// writeJSON writes v as the response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v, json.Deterministic(true), jsontext.EscapeForHTML(false))
	if err != nil {
		writeProblem(w, problemOf(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// fail writes err's problem.
func (a *api) fail(w http.ResponseWriter, err error) {
	p := problemOf(err)
	if p.Status >= 500 {
		a.log.Warn("request failed", "err", err)
	}
	writeProblem(w, p)
}

// createRequest is the body of POST /v1/sessions.
type createRequest struct {
	ID     string            `json:"id"`
	Python string            `json:"python"`
	Cwd    string            `json:"cwd"`
	Env    map[string]string `json:"env"`
	Limits limits.Session    `json:"limits"`
	MCP    []serve.MCPServer `json:"mcp"`
	Route  string            `json:"route"`
	// Instructions and InstructionsFile give the session's own instruction source.
	Instructions     string `json:"instructions"`
	InstructionsFile string `json:"instructions_file"`
	// Sandbox and Network confine the session's workers and workspace commands; ""
	// takes the daemon's.
	Sandbox string `json:"sandbox"`
	Network string `json:"network"`
}

func (a *api) createSession(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if p := decode(w, r, &req, MaxBodyBytes, true); p != nil {
		writeProblem(w, p)
		return
	}
	if req.ID == "" {
		req.ID = NewSessionID(time.Now())
	}
	s, err := a.d.Create(r.Context(), serve.Config{ID: req.ID, Python: req.Python, Cwd: req.Cwd, Env: req.Env,
		Limits: req.Limits, MCP: req.MCP, Route: req.Route, Instructions: req.Instructions, InstructionsFile: req.InstructionsFile,
		Sandbox: req.Sandbox, Network: req.Network})
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+s.ID())
	writeJSON(w, http.StatusCreated, s.Info())
}

// NewSessionID is a fresh session name: s-<UTC time>-<6 hex digits>.
func NewSessionID(now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return "s-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// sessionList is the body of GET /v1/sessions.
type sessionList struct {
	Sessions []serve.Info `json:"sessions"`
}

func (a *api) listSessions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, sessionList{Sessions: a.d.Sessions()})
}

func (a *api) session(w http.ResponseWriter, r *http.Request) *serve.Session {
	s, err := a.d.Session(r.PathValue("sid"))
	if err != nil {
		a.fail(w, err)
		return nil
	}
	return s
}

func (a *api) getSession(w http.ResponseWriter, r *http.Request) {
	if s := a.session(w, r); s != nil {
		writeJSON(w, http.StatusOK, s.Info())
	}
}

func (a *api) stopSession(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	if err := s.Stop("stopped by a client"); err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.Info())
}

// pruned is the body of POST /v1/sessions:prune.
type pruned struct {
	Pruned []string `json:"pruned"`
}

func (a *api) prune(w http.ResponseWriter, r *http.Request) {
	var age time.Duration
	if v := r.URL.Query().Get("older_than"); v != "" {
		var err error
		if age, err = time.ParseDuration(v); err != nil || age < 0 {
			writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, fmt.Sprintf("older_than %q is not a duration such as 168h", v)))
			return
		}
	}
	gone, err := a.d.Prune(age)
	if err != nil {
		a.fail(w, err)
		return
	}
	if gone == nil {
		gone = []string{}
	}
	writeJSON(w, http.StatusOK, pruned{Pruned: gone})
}

// executeRequest is the body of POST /v1/sessions/{sid}/executions.
type executeRequest struct {
	Code           *string `json:"code"`
	WaitMS         *int64  `json:"wait_ms"`
	IdempotencyKey string  `json:"idempotency_key"`
}

// waitOf checks a wait in milliseconds; nil is def.
func waitOf(ms *int64, def int64) (time.Duration, *Problem) {
	if ms == nil {
		return time.Duration(def) * time.Millisecond, nil
	}
	if *ms < 0 || *ms > MaxWaitMS {
		return 0, problem(http.StatusBadRequest, CodeInvalid, fmt.Sprintf("wait_ms must be 0..%d, got %d", MaxWaitMS, *ms))
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func (a *api) execute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if p := decode(w, r, &req, MaxBodyBytes, false); p != nil {
		writeProblem(w, p)
		return
	}
	if req.Code == nil {
		writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, "code is required"))
		return
	}
	wait, p := waitOf(req.WaitMS, DefaultWaitMS)
	if p != nil {
		writeProblem(w, p)
		return
	}
	s := a.session(w, r)
	if s == nil {
		return
	}
	if wait > 0 {
		release, ok := a.longPoll(w)
		if !ok {
			return
		}
		defer release()
	}
	x, err := s.Execute(r.Context(), *req.Code, req.IdempotencyKey)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.answer(w, r, s, x, wait)
}

// answer writes x's record once it ends within wait (200), else as it runs with its
// Location (202).
func (a *api) answer(w http.ResponseWriter, r *http.Request, s *serve.Session, x *serve.Execution, wait time.Duration) {
	rec, err := s.Wait(r.Context(), x, wait)
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("Location", "/v1/executions/"+rec.ID)
	status := http.StatusOK
	if rec.Running() {
		status = http.StatusAccepted
	}
	writeJSON(w, status, rec)
}

// execution finds the execution the path names.
func (a *api) execution(w http.ResponseWriter, r *http.Request) (*serve.Session, *serve.Execution) {
	sid, cell, err := serve.ParseExecutionID(r.PathValue("eid"))
	if err != nil {
		a.fail(w, err)
		return nil, nil
	}
	s, err := a.d.Session(sid)
	if err != nil {
		a.fail(w, err)
		return nil, nil
	}
	x, err := s.Execution(r.Context(), cell)
	if err != nil {
		a.fail(w, err)
		return nil, nil
	}
	return s, x
}

func (a *api) getExecution(w http.ResponseWriter, r *http.Request) {
	var ms *int64
	if v := r.URL.Query().Get("wait_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, fmt.Sprintf("wait_ms %q is not an integer", v)))
			return
		}
		ms = &n
	}
	wait, p := waitOf(ms, 0)
	if p != nil {
		writeProblem(w, p)
		return
	}
	s, x := a.execution(w, r)
	if x == nil {
		return
	}
	if wait > 0 {
		release, ok := a.longPoll(w)
		if !ok {
			return
		}
		defer release()
	}
	rec, err := s.Wait(r.Context(), x, wait)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// display serves a display item's body as its MIME type. A body a cell made is never
// run as the daemon's page: not sniffed, and sandboxed.
func (a *api) display(w http.ResponseWriter, r *http.Request) {
	s, x := a.execution(w, r)
	if x == nil {
		return
	}
	n, err := serve.ParseDisplayIndex(r.PathValue("n"))
	if err != nil {
		a.fail(w, err)
		return
	}
	d, err := s.Display(r.Context(), x.Cell(), n)
	if err != nil {
		a.fail(w, err)
		return
	}
	body, err := d.Content()
	if err != nil {
		a.fail(w, err)
		return
	}
	ct := d.MIMEType
	if strings.HasPrefix(ct, "text/") {
		ct += "; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	w.Write(body)
}

func (a *api) interrupt(w http.ResponseWriter, r *http.Request) {
	s, x := a.execution(w, r)
	if x == nil {
		return
	}
	if err := s.Interrupt(r.Context(), x); err != nil {
		a.fail(w, err)
		return
	}
	rec, err := s.Record(r.Context(), x.Cell())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// cancelTurn cancels the session's running agent turn: {"cancelled": whether one ran}.
func (a *api) cancelTurn(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	cancelled, err := s.CancelTurn(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"cancelled": cancelled})
}

// inputRequest is the body of POST /v1/sessions/{sid}/inputs.
type inputRequest struct {
	Text *string `json:"text"`
}

// inputReply is what an input was recorded as.
type inputReply struct {
	ID        int64          `json:"id"`
	Ref       string         `json:"ref"` // event:<id>, as evidence names it
	Attention jsontext.Value `json:"attention"`
}

func (a *api) input(w http.ResponseWriter, r *http.Request) {
	var req inputRequest
	if p := decode(w, r, &req, MaxBodyBytes, false); p != nil {
		writeProblem(w, p)
		return
	}
	if req.Text == nil {
		writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, "text is required"))
		return
	}
	if err := policy.ValidSendText(*req.Text); err != nil {
		writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, err.Error()))
		return
	}
	s := a.session(w, r)
	if s == nil {
		return
	}
	ev, err := s.Input(r.Context(), *req.Text)
	if errors.Is(err, store.ErrInvalid) {
		writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, err.Error()))
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	attention := ev.Attention
	if len(attention) == 0 {
		attention = jsontext.Value("null")
	}
	writeJSON(w, http.StatusCreated, inputReply{ID: ev.ID, Ref: "event:" + strconv.FormatInt(ev.ID, 10), Attention: attention})
}

// programRequest is the body of POST /v1/programs:run.
type programRequest struct {
	Code   *string       `json:"code"`
	Limits ProgramLimits `json:"limits"`
}

func (a *api) runProgram(w http.ResponseWriter, r *http.Request) {
	var req programRequest
	if p := decode(w, r, &req, MaxBodyBytes, false); p != nil {
		writeProblem(w, p)
		return
	}
	if req.Code == nil {
		writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, "code is required"))
		return
	}
	res, err := a.opts.RunProgram(r.Context(), *req.Code, req.Limits)
	if errors.Is(err, ErrProgramInvalid) {
		writeProblem(w, problem(http.StatusBadRequest, CodeProgramInvalid, err.Error()))
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(res, '\n'))
}

func (a *api) getFile(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	f, size, err := s.ReadFile(r.Context(), r.PathValue("path"))
	if err != nil {
		a.fail(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		io.CopyN(w, f, size)
	}
}

// written is what a PUT of a file wrote.
type written struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

func (a *api) putFile(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	if r.ContentLength > serve.MaxFileBytes {
		writeProblem(w, problem(http.StatusRequestEntityTooLarge, CodeTooLarge,
			fmt.Sprintf("a file of %d bytes, over the limit of %d", r.ContentLength, serve.MaxFileBytes)))
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(BodyReadTimeout))
	n, err := s.WriteFile(r.Context(), r.PathValue("path"), r.Body)
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, written{Path: r.PathValue("path"), Bytes: n})
}

func (a *api) transcript(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	id, err := s.RecordID(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	t, err := transcript.Load(r.Context(), a.d.Store(), id)
	if err != nil {
		a.fail(w, err)
		return
	}
	messages := t.Render()
	if messages == nil {
		messages = []transcript.Message{}
	}
	writeJSON(w, http.StatusOK, messages)
}

// peers answers GET /v1/sessions/{sid}/peers: the session's peers as a tree.
func (a *api) peers(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	tree := []peer.Info{}
	if a.opts.Peers != nil {
		var err error
		if tree, err = a.opts.Peers.Tree(r.Context(), s.ID()); err != nil {
			a.fail(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"peers": tree})
}
