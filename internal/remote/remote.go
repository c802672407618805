// Package remote serves remote.ensure, remote.call, remote.cancel and remote.close: a
// cell runs code in a namespace on another kiln daemon, a target named in kiln.toml.
//
// A remote namespace is a session of the target's daemon, one per calling session and
// target, created or reconnected by remote.ensure. The mapping is durable in the
// caller's record, so it outlives the caller's host. The namespace lives in one remote
// generation, marked by a value only that generation holds: every call's code is led by
// a line that checks the mark, so code never runs in a fresh namespace unnoticed. A
// namespace whose generation ended (its worker died, its daemon restarted) answers
// namespace_lost with the generation that is current, and remote.ensure makes a new one.
//
// An operation id is an idempotency key on both sides: the caller records the operation
// before it is sent and its outcome once final, and the remote daemon holds the key with
// the cell it started. A retry, after either side's crash, returns the first outcome or
// the execution's state now, and never runs the code twice. The remote's record holds
// each call's cell, its first line naming the caller: host, session and operation id.
//
// Every answer of a target is read through MaxResponseBytes and every request ends
// within its wait and Slack: a remote that floods, answers garbage or stalls costs the
// host a bounded amount of memory and time, and the cell an explicit error.
package remote

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/config"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// Methods this package serves.
const (
	EnsureMethod = "remote.ensure"
	CallMethod   = "remote.call"
	CancelMethod = "remote.cancel"
	CloseMethod  = "remote.close"
)

// Error codes of remote requests, beside the host's own.
const (
	CodeNotFound          = "not_found"          // no such target, namespace or operation
	CodeNamespaceLost     = "namespace_lost"     // the namespace's generation ended
	CodeNamespaceClosed   = "namespace_closed"   // remote.close closed the namespace
	CodeTargetUnreachable = "target_unreachable" // no connection, or the command failed
	CodeUnauthorized      = "unauthorized"       // the target refused the token, or there is none
	CodeTLSFailed         = "tls_failed"         // no TLS session, or a certificate not trusted
	CodeRemoteError       = "remote_error"       // the remote refused, answered garbage or stalled
)

// Problem codes of a remote daemon's API that the calls tell apart: stable across
// versions (docs/serve.md).
const (
	problemNoSession   = "session_not_found"
	problemNoExecution = "execution_not_found"
	problemExists      = "session_exists"
	problemStopped     = "session_stopped"
	problemBusy        = "busy"
	problemNotRunning  = "not_running"
)

// Operations remote.call makes.
const OperationExecute = "execute"

// Bounds of a call's payload, as the remote daemon applies them.
const (
	// MaxCodeBytes bounds a call's code with the line that guards it: a cell's source
	// (the spec's 262,144 bytes).
	MaxCodeBytes = wire.MaxCodeBytes
	// DefaultWaitMS is how long a call waits for its cell by default; MaxWaitMS the
	// longest it may ask (the remote daemon's bound).
	DefaultWaitMS = 30000
	MaxWaitMS     = 300000
	// EnsureWait bounds the cell remote.ensure runs to mark the namespace.
	EnsureWait = 30 * time.Second
)

// Error is a remote request's refusal, as the cell is answered.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// reply is err as the cell's host reply.
func reply(err error) wire.Reply {
	var e *Error
	if errors.As(err, &e) {
		return host.Error(e.Code, "%s", e.Message)
	}
	var p *Problem
	if errors.As(err, &p) {
		return host.Error(CodeRemoteError, "the remote refused with %s (%d): %s", p.Code, p.Status, p.Detail)
	}
	return host.Error(host.CodeStoreFailed, "%v", err)
}

// reply is err as the cell's host reply; a failure to reach a target or of its answer
// is logged.
func (s *Service) reply(err error) wire.Reply {
	r := reply(err)
	switch r.Code {
	case CodeTargetUnreachable, CodeUnauthorized, CodeTLSFailed, CodeRemoteError, host.CodeStoreFailed:
		if s.Logger != nil {
			s.Logger.Info("a remote request failed", "code", r.Code, "message", r.Message)
		}
	}
	return r
}

// Service serves the remote.* methods of a session.
type Service struct {
	// Targets are the targets by name.
	Targets map[string]Target
	// Getenv reads the environment, for tokens; nil is os.Getenv's absence (no token).
	Getenv func(string) string
	// Host names this host in the remote's record.
	Host   string
	Logger *slog.Logger
	// Slack is how long past its wait a request may take; 0 is the package's Slack.
	Slack time.Duration

	mu       sync.Mutex
	clients  map[string]*client
	ensuring map[ensureKey]chan struct{} // closed when that remote.ensure ends
}

// ensureKey names the namespace a remote.ensure makes or reconnects: one a session and
// target.
type ensureKey struct {
	session int64
	target  string
}

// ensureTurn waits until no other remote.ensure of key runs, then returns the function
// that ends this one's turn. Two ensures at once, from one cell's concurrent requests,
// would both find no namespace and both make one.
func (s *Service) ensureTurn(ctx context.Context, key ensureKey) (end func(), err error) {
	for {
		s.mu.Lock()
		running, busy := s.ensuring[key]
		if !busy {
			if s.ensuring == nil {
				s.ensuring = make(map[ensureKey]chan struct{})
			}
			done := make(chan struct{})
			s.ensuring[key] = done
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.ensuring, key)
				s.mu.Unlock()
				close(done)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return nil, fmt.Errorf("remote: waiting for another remote.ensure of target %s: %w", key.target, ctx.Err())
		}
	}
}

// Close ends the targets' idle connections and their commands.
func (s *Service) Close() {
	s.mu.Lock()
	clients := s.clients
	s.clients = nil
	s.mu.Unlock()
	for _, c := range clients {
		c.close()
	}
}

// client is the client of target name, made on first use.
func (s *Service) client(name string) (*client, error) {
	t, ok := s.Targets[name]
	if !ok {
		return nil, &Error{Code: CodeNotFound, Message: fmt.Sprintf(
			"no target %q is configured: name one as [remotes.%s] in the kiln.toml of the daemon serving the session "+
				"(a session outside kiln serve has none)", name, name)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clients[name]; c != nil {
		return c, nil
	}
	getenv := s.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c, err := newClient(t, getenv, s.Slack)
	if err != nil {
		return nil, &Error{Code: CodeTargetUnreachable, Message: err.Error()}
	}
	if s.clients == nil {
		s.clients = map[string]*client{}
	}
	s.clients[name] = c
	return c, nil
}

// ensured is remote.ensure's reply.
type ensured struct {
	Target              string `json:"target"`
	NamespaceID         string `json:"namespace_id"`
	NamespaceGeneration string `json:"namespace_generation"`
	Created             bool   `json:"created"`
}

// ensure creates or reconnects the session's namespace on a target.
func (s *Service) ensure(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		Target string `json:"target"`
	}
	if err := req.Decode(&p); err != nil || p.Target == "" {
		return host.Reply(host.Error(host.CodeInvalidRequest, "remote.ensure takes {target}: %v", errOr(err, "no target")))
	}
	c, err := s.client(p.Target)
	if err != nil {
		return host.Reply(s.reply(err))
	}
	end, err := s.ensureTurn(ctx, ensureKey{req.Session.ID, p.Target})
	if err != nil {
		return host.Reply(s.reply(err))
	}
	defer end()
	st := req.Router().Store()
	var n store.RemoteNamespace
	err = st.Update(ctx, func(tx *store.Tx) error {
		n, err = tx.OpenRemoteNamespace(req.Session.ID, p.Target)
		return err
	})
	created := false
	switch {
	case errors.Is(err, store.ErrNotFound):
		if n, err = s.newNamespace(ctx, req, p.Target); err != nil {
			return host.Reply(s.reply(err))
		}
		created = true
	case err != nil:
		return host.Reply(s.reply(err))
	}
	for range 2 { // a namespace the remote stopped is replaced by a new one, once
		gen, marker, err := s.mark(ctx, c, req, n)
		var pr *Problem
		if errors.As(err, &pr) && pr.Code == problemStopped {
			if err := st.Update(ctx, func(tx *store.Tx) error { return tx.CloseRemoteNamespace(req.Session.ID, n.NamespaceID) }); err != nil {
				return host.Reply(s.reply(err))
			}
			if n, err = s.newNamespace(ctx, req, p.Target); err != nil {
				return host.Reply(s.reply(err))
			}
			created = true
			continue
		}
		if err != nil {
			return host.Reply(s.reply(err))
		}
		created = created || gen != n.Generation || marker != n.Marker
		// Recorded before the turn ends, so an ensure waiting for it finds the generation.
		if err := req.Record(ctx, func(tx *store.Tx) error {
			return tx.SetRemoteGeneration(req.Session.ID, n.NamespaceID, gen, marker)
		}); err != nil {
			return host.Reply(s.reply(err))
		}
		return host.Reply(host.OK(ensured{Target: p.Target, NamespaceID: n.NamespaceID, NamespaceGeneration: gen, Created: created}))
	}
	return host.Reply(host.Error(CodeRemoteError, "target %s stopped namespace %s as soon as it was made", p.Target, n.NamespaceID))
}

// newNamespace records a new namespace of the session on target, before the remote
// knows of it.
func (s *Service) newNamespace(ctx context.Context, req *host.Request, target string) (store.RemoteNamespace, error) {
	n := store.RemoteNamespace{SessionID: req.Session.ID, NamespaceID: "ns-" + randomHex(10), Target: target}
	err := req.Record(ctx, func(tx *store.Tx) error { return tx.InsertRemoteNamespace(&n) })
	return n, err
}

// markPattern is a marker's repr, as the marking cell's result shows it.
var markPattern = regexp.MustCompile(`^'([0-9a-f]{16})'$`)

// mark runs the cell that marks namespace n in the remote's current generation, creating
// the remote session if the remote has none, and returns the generation and the marker in
// force there: n's when the generation is n's, else a new one.
func (s *Service) mark(ctx context.Context, c *client, req *host.Request, n store.RemoteNamespace) (generation, marker string, err error) {
	code := fmt.Sprintf("__kiln_remote__ = globals().get(\"__kiln_remote__\") or %q  # kiln remote.ensure from host=%s session=%s\n__kiln_remote__",
		randomHex(markerBytes/2), HostName(s.Host), req.Session.Name)
	var rec record
	path := "/v1/sessions/" + url.PathEscape(n.NamespaceID)
	body := map[string]any{"code": code, "wait_ms": EnsureWait.Milliseconds()}
	_, err = c.do(ctx, "POST", path+"/executions", body, EnsureWait, &rec)
	var p *Problem
	if errors.As(err, &p) && p.Code == problemNoSession {
		_, err = c.do(ctx, "POST", "/v1/sessions", map[string]any{"id": n.NamespaceID}, 0, nil)
		if errors.As(err, &p) && p.Code == problemExists {
			err = nil
		}
		if err != nil {
			return "", "", err
		}
		_, err = c.do(ctx, "POST", path+"/executions", body, EnsureWait, &rec)
	}
	if errors.As(err, &p) && p.Code == problemBusy { // a call runs: the namespace is live if it runs in n's generation
		var info session
		if _, err := c.do(ctx, "GET", path, nil, 0, &info); err != nil {
			return "", "", err
		}
		if info.Running != "" && info.Generation == n.Generation && n.Generation != "" {
			return n.Generation, n.Marker, nil
		}
		return "", "", &Error{Code: CodeRemoteError, Message: fmt.Sprintf(
			"namespace %s is busy running %s, in generation %s: try again once it ends", n.NamespaceID, info.Running, info.Generation)}
	}
	if err != nil {
		return "", "", err
	}
	m := markPattern.FindStringSubmatch(resultText(rec))
	if rec.Status != "ok" || m == nil || rec.Generation == "" {
		return "", "", &Error{Code: CodeRemoteError, Message: fmt.Sprintf(
			"the cell marking namespace %s ended %s, not with its mark: %s", n.NamespaceID, rec.Status, clip(describe(rec)))}
	}
	return rec.Generation, m[1], nil
}

// resultText is the text of a record's result output, "" when it has none.
func resultText(r record) string {
	var out []struct {
		Stream string `json:"stream"`
		Text   string `json:"text"`
	}
	if json.Unmarshal(r.Output, &out, json.RejectUnknownMembers(false)) != nil {
		return ""
	}
	for _, o := range out {
		if o.Stream == "result" {
			return o.Text
		}
	}
	return ""
}

// describe says what a record holds, for an error.
func describe(r record) string {
	if r.Error != nil {
		return *r.Error
	}
	return string(r.Output)
}

// namespace reads the session's namespace id for a request on target (any target when
// ""): not_found, namespace_closed, or a namespace of another target are refusals.
func (s *Service) namespace(ctx context.Context, req *host.Request, id, target string) (store.RemoteNamespace, error) {
	var n store.RemoteNamespace
	err := req.Router().Store().Update(ctx, func(tx *store.Tx) error {
		var err error
		n, err = tx.RemoteNamespaceByID(req.Session.ID, id)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return n, &Error{Code: CodeNotFound, Message: fmt.Sprintf("session %s has no remote namespace %q: remote.ensure makes one", req.Session.Name, id)}
	case err != nil:
		return n, err
	case n.State == store.RemoteClosed:
		return n, &Error{Code: CodeNamespaceClosed, Message: fmt.Sprintf("namespace %s on %s was closed: remote.ensure makes a new one", id, n.Target)}
	case target != "" && n.Target != target:
		return n, &Error{Code: host.CodeInvalidRequest, Message: fmt.Sprintf("namespace %s is on target %s, not %s", id, n.Target, target)}
	}
	return n, nil
}

// namespaced are the parameters that name a namespace.
type namespaced struct {
	NamespaceID         string `json:"namespace_id"`
	NamespaceGeneration string `json:"namespace_generation"`
}

// located decodes p, the parameters of method, which hold ns, and returns the
// namespace they name and its target's client.
func (s *Service) located(ctx context.Context, req *host.Request, method string, p any, ns *namespaced) (store.RemoteNamespace, *client, error) {
	if err := req.Decode(p); err != nil {
		return store.RemoteNamespace{}, nil, &Error{Code: host.CodeInvalidRequest, Message: fmt.Sprintf("%s: %v", method, err)}
	}
	n, err := s.namespace(ctx, req, ns.NamespaceID, "")
	if err != nil {
		return n, nil, err
	}
	c, err := s.client(n.Target)
	return n, c, err
}

// callParams are remote.call's parameters.
type callParams struct {
	Target              string         `json:"target"`
	NamespaceID         string         `json:"namespace_id"`
	NamespaceGeneration string         `json:"namespace_generation"`
	OperationID         string         `json:"operation_id"`
	Operation           string         `json:"operation"`
	Payload             jsontext.Value `json:"payload"`
}

// executePayload is an execute operation's payload.
type executePayload struct {
	Code   *string `json:"code"`
	WaitMS *int64  `json:"wait_ms"`
}

// called is remote.call's reply, and remote.cancel's record.
type called struct {
	OperationID         string `json:"operation_id"`
	NamespaceID         string `json:"namespace_id"`
	NamespaceGeneration string `json:"namespace_generation"`
	Execution           string `json:"execution"` // the remote execution, <namespace>:c-N
	Record              record `json:"record"`
}

// call runs an operation in a namespace, at most once per operation id.
func (s *Service) call(ctx context.Context, req *host.Request) host.Outcome {
	var p callParams
	if err := req.Decode(&p); err != nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "remote.call: %v", err))
	}
	for _, f := range []struct{ name, v string }{{"target", p.Target}, {"namespace_id", p.NamespaceID},
		{"namespace_generation", p.NamespaceGeneration}, {"operation_id", p.OperationID}} {
		if !wire.ValidIdentifier(f.v) {
			return host.Reply(host.Error(host.CodeInvalidRequest, "remote.call: %s must be 1..128 of [A-Za-z0-9_.-], got %q", f.name, f.v))
		}
	}
	if p.Operation != OperationExecute {
		return host.Reply(host.Error(host.CodeInvalidRequest, "remote.call: operation %q is not one kiln makes: %q", p.Operation, OperationExecute))
	}
	var pl executePayload
	if err := json.Unmarshal(p.Payload, &pl, json.RejectUnknownMembers(true)); err != nil || pl.Code == nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "remote.call: an execute payload is {code, wait_ms?}: %v", errOr(err, "no code")))
	}
	wait := int64(DefaultWaitMS)
	if pl.WaitMS != nil {
		if *pl.WaitMS < 0 || *pl.WaitMS > MaxWaitMS {
			return host.Reply(host.Error(host.CodeInvalidRequest, "remote.call: wait_ms must be 0..%d, got %d", MaxWaitMS, *pl.WaitMS))
		}
		wait = *pl.WaitMS
	}
	c, err := s.client(p.Target)
	if err != nil {
		return host.Reply(s.reply(err))
	}
	n, err := s.namespace(ctx, req, p.NamespaceID, p.Target)
	if err != nil {
		return host.Reply(s.reply(err))
	}
	if guard := GuardBytes(s.Host, req.Session.Name, p.OperationID); len(*pl.Code)+guard > MaxCodeBytes {
		return host.Reply(host.Error(host.CodeInvalidRequest, "remote.call: code of %d bytes and the %d-byte line that guards it, over a cell's %d",
			len(*pl.Code), guard, MaxCodeBytes))
	}
	sum := sha256.Sum256([]byte(p.Operation + "\x00" + *pl.Code))
	op := store.RemoteOperation{SessionID: req.Session.ID, NamespaceID: n.NamespaceID, OperationID: p.OperationID,
		Generation: p.NamespaceGeneration, Marker: n.Marker, Digest: hex.EncodeToString(sum[:])}
	var prior store.RemoteOperation
	err = req.Record(ctx, func(tx *store.Tx) error {
		var err error
		prior, err = tx.RemoteOperationByID(req.Session.ID, n.NamespaceID, p.OperationID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if p.NamespaceGeneration != n.Generation {
				return lost(n, p.NamespaceGeneration, n.Generation)
			}
			op.RequestID = req.ID()
			return tx.StartRemoteOperation(&op)
		case err != nil:
			return err
		case prior.Digest != op.Digest:
			return &Error{Code: host.CodeInvalidRequest, Message: fmt.Sprintf(
				"operation %s was made with another operation or payload: an operation id names one operation", p.OperationID)}
		}
		op = prior
		return nil
	})
	if err != nil {
		return host.Reply(s.reply(err))
	}
	if op.Outcome != nil { // final: the first outcome, as it was replied
		var o outcome
		if err := json.Unmarshal(op.Outcome, &o); err != nil {
			return host.Reply(s.reply(err))
		}
		return host.Reply(wire.Reply{Kind: o.Kind, Value: o.Value, Code: o.Code, Message: o.Message})
	}
	rec, err := s.execute(ctx, c, req, n, op, *pl.Code, time.Duration(wait)*time.Millisecond)
	var out wire.Reply
	switch {
	case err != nil && !isFinal(err):
		return host.Reply(s.reply(err))
	case err != nil:
		out = s.reply(err)
	default:
		out = host.OK(called{OperationID: op.OperationID, NamespaceID: n.NamespaceID, NamespaceGeneration: op.Generation,
			Execution: rec.ID, Record: rec})
	}
	final := err != nil || !rec.running()
	return host.Outcome{Commit: func(tx *store.Tx, _ *host.Request) (wire.Reply, error) {
		var data jsontext.Value
		if final {
			out = host.Bounded(out)
			if data, err = outcomeOf(out); err != nil {
				return wire.Reply{}, err
			}
		}
		return out, tx.NoteRemoteOperation(req.Session.ID, n.NamespaceID, op.OperationID, rec.ID, data)
	}}
}

// outcome is an operation's final reply as the record keeps it.
type outcome struct {
	Kind    string         `json:"kind"`
	Value   jsontext.Value `json:"value,omitzero"`
	Code    string         `json:"code,omitempty"`
	Message string         `json:"message,omitempty"`
}

// outcomeOf is r as the record keeps it.
func outcomeOf(r wire.Reply) (jsontext.Value, error) {
	return json.Marshal(outcome{Kind: r.Kind, Value: r.Value, Code: r.Code, Message: r.Message}, json.Deterministic(true))
}

// lost is the refusal of a call in generation, which is not current's.
func lost(n store.RemoteNamespace, generation, current string) *Error {
	now := "no generation is live there"
	if current != "" {
		now = "its current generation is " + current
	}
	return &Error{Code: CodeNamespaceLost, Message: fmt.Sprintf(
		"namespace %s on %s: generation %s is lost, with what it held; %s. remote.ensure reconnects, in a fresh namespace",
		n.NamespaceID, n.Target, generation, now)}
}

// isFinal says err is an outcome of the operation itself, which a retry answers again.
func isFinal(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeNamespaceLost
}

// execute sends op's code to the remote, keyed by its operation id, and returns the
// record of the cell it started, now or earlier; an operation whose cell is known
// already is asked for that cell. A cell that ran in another generation
// than op's found no mark: namespace_lost, final.
func (s *Service) execute(ctx context.Context, c *client, req *host.Request, n store.RemoteNamespace, op store.RemoteOperation,
	code string, wait time.Duration) (record, error) {
	if deadline, ok := ctx.Deadline(); ok { // within the cell's remaining time
		wait = min(wait, max(time.Until(deadline)-time.Second, 0))
	}
	var rec record
	var err error
	if op.Execution != "" { // asked by its id, which outlives the remote's idempotency keys
		_, err = c.do(ctx, "GET", "/v1/executions/"+url.PathEscape(op.Execution)+"?wait_ms="+strconv.FormatInt(wait.Milliseconds(), 10),
			nil, wait, &rec)
	} else {
		body := map[string]any{"code": guarded(code, op, s.Host, req.Session.Name), "wait_ms": wait.Milliseconds(),
			"idempotency_key": op.OperationID}
		_, err = c.do(ctx, "POST", "/v1/sessions/"+url.PathEscape(n.NamespaceID)+"/executions", body, wait, &rec)
	}
	var p *Problem
	switch {
	case errors.As(err, &p) && (p.Code == problemNoSession || p.Code == problemNoExecution):
		return rec, lost(n, op.Generation, "")
	case errors.As(err, &p) && p.Code == problemStopped:
		return rec, &Error{Code: CodeNamespaceClosed, Message: fmt.Sprintf("namespace %s on %s was stopped there: %s", n.NamespaceID, n.Target, p.Detail)}
	case err != nil:
		return rec, err
	case rec.Generation != op.Generation:
		return rec, lost(n, op.Generation, rec.Generation)
	}
	return rec, nil
}

// guarded is code led by the line that runs it only in op's namespace, and names the
// caller in the remote's record. The line is the cell's first: a traceback's line
// numbers are the code's plus one.
func guarded(code string, op store.RemoteOperation, hostName, session string) string {
	return fmt.Sprintf("if globals().get(\"__kiln_remote__\") != %q: raise RuntimeError(\"kiln: remote namespace lost\")  "+
		"# kiln remote.call from host=%s session=%s operation=%s\n%s", op.Marker, HostName(hostName), session, op.OperationID, code)
}

// markerBytes is the length of a namespace's marker, 8 random bytes in hex.
const markerBytes = 16

// GuardBytes is the length of the line that leads a call's code, for the caller host,
// session and operation id.
func GuardBytes(hostName, session, operation string) int {
	return len(guarded("", store.RemoteOperation{Marker: strings.Repeat("0", markerBytes), OperationID: operation}, hostName, session))
}

// cancelled is remote.cancel's reply.
type cancelled struct {
	OperationID string `json:"operation_id"`
	// Outcome is what happened: interrupted (the namespace intact), hard_stopped (the
	// namespace lost with the cell), or ended (the cell had ended on its own).
	Outcome         string `json:"outcome"`
	NamespaceIntact bool   `json:"namespace_intact"`
	Record          record `json:"record"`
}

// Cancel outcomes.
const (
	OutcomeInterrupted = "interrupted"
	OutcomeHardStopped = "hard_stopped"
	OutcomeEnded       = "ended"
)

// cancel interrupts an operation's remote cell and says what happened.
func (s *Service) cancel(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		namespaced  `json:",inline"`
		OperationID string `json:"operation_id"`
	}
	n, c, err := s.located(ctx, req, CancelMethod, &p, &p.namespaced)
	if err != nil {
		return host.Reply(s.reply(err))
	}
	var op store.RemoteOperation
	err = req.Record(ctx, func(tx *store.Tx) error {
		var err error
		op, err = tx.RemoteOperationByID(req.Session.ID, n.NamespaceID, p.OperationID)
		if errors.Is(err, store.ErrNotFound) {
			return &Error{Code: CodeNotFound, Message: fmt.Sprintf("namespace %s has no operation %q", n.NamespaceID, p.OperationID)}
		}
		return err
	})
	if err != nil {
		return host.Reply(s.reply(err))
	}
	if op.Generation != p.NamespaceGeneration {
		return host.Reply(host.Error(host.CodeInvalidRequest, "operation %s was made in generation %s, not %s", op.OperationID, op.Generation, p.NamespaceGeneration))
	}
	if op.Execution == "" {
		return host.Reply(host.Error(CodeNotFound, "operation %s has no remote execution known yet: remote.call it again, "+
			"with the same operation_id, to learn its state", op.OperationID))
	}
	var rec record
	path := "/v1/executions/" + url.PathEscape(op.Execution)
	_, err = c.do(ctx, "POST", path+"/interrupt", nil, 0, &rec)
	var pr *Problem
	if errors.As(err, &pr) && pr.Code == problemNotRunning {
		_, err = c.do(ctx, "GET", path, nil, 0, &rec)
	}
	if err != nil {
		return host.Reply(s.reply(err))
	}
	out := cancelled{OperationID: op.OperationID, Record: rec, Outcome: OutcomeEnded, NamespaceIntact: !rec.NamespaceLost}
	switch {
	case rec.NamespaceLost:
		out.Outcome = OutcomeHardStopped
	case rec.Status == "interrupted":
		out.Outcome = OutcomeInterrupted
	}
	final := host.Bounded(host.OK(called{OperationID: op.OperationID, NamespaceID: n.NamespaceID,
		NamespaceGeneration: op.Generation, Execution: rec.ID, Record: rec}))
	return host.Outcome{Commit: func(tx *store.Tx, _ *host.Request) (wire.Reply, error) {
		if !rec.running() {
			data, err := outcomeOf(final)
			if err != nil {
				return wire.Reply{}, err
			}
			if err := tx.NoteRemoteOperation(req.Session.ID, n.NamespaceID, op.OperationID, rec.ID, data); err != nil {
				return wire.Reply{}, err
			}
		}
		return host.OK(out), nil
	}}
}

// closed is remote.close's reply.
type closed struct {
	NamespaceID string `json:"namespace_id"`
	Closed      bool   `json:"closed"`
}

// close stops a namespace's remote session; its later calls are namespace_closed.
func (s *Service) close(ctx context.Context, req *host.Request) host.Outcome {
	var p namespaced
	n, c, err := s.located(ctx, req, CloseMethod, &p, &p)
	if err != nil {
		return host.Reply(s.reply(err))
	}
	if err := req.Record(ctx, func(*store.Tx) error { return nil }); err != nil {
		return host.Reply(s.reply(err))
	}
	_, err = c.do(ctx, "DELETE", "/v1/sessions/"+url.PathEscape(n.NamespaceID), nil, 0, nil)
	var pr *Problem
	if errors.As(err, &pr) && (pr.Code == problemStopped || pr.Code == problemNoSession) {
		err = nil // stopped, or gone, already
	}
	if err != nil {
		return host.Reply(s.reply(err))
	}
	return host.Outcome{Commit: func(tx *store.Tx, _ *host.Request) (wire.Reply, error) {
		if err := tx.CloseRemoteNamespace(req.Session.ID, n.NamespaceID); err != nil {
			return wire.Reply{}, err
		}
		return host.OK(closed{NamespaceID: n.NamespaceID, Closed: true}), nil
	}}
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// errOr is err's text, or else's.
func errOr(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

// HostName is name made fit for a record's line: letters, digits, dot, hyphen and
// underscore, at most 64 bytes; "unknown" when nothing is left.
func HostName(name string) string {
	name = strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return -1
	}, name)
	if len(name) > 64 {
		name = name[:64]
	}
	if name == "" {
		return "unknown"
	}
	return name
}

// Targets are the remote targets cfg names.
func Targets(cfg config.Config) map[string]Target {
	out := make(map[string]Target, len(cfg.Remotes))
	for name, r := range cfg.Remotes {
		out[name] = Target{Name: name, Kind: r.Kind, URL: r.URL, TokenEnv: r.TokenEnv, CAFile: cfg.CAPath(r), Command: r.Command}
	}
	return out
}
