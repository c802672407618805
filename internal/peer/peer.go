// Package peer serves the peer.* host methods: a session (the parent) opens other
// sessions of the same daemon (its peers), sends each requests, waits for their results,
// cancels them, and stops its peers, with or without letting them finish.
//
// A peer is a session like any other — its own workbench, transcript, hooks worker and
// record, confined alike — whose instructions add a short peer contract. A request lands
// in the peer's durable inbox as an input of source "peer" whose payload carries the
// request's identity; the model reads it framed "[<time> · peer request <id> from
// <parent>]". The peer answers from one of its cells with peer.submit_result; the parent
// then gets an input of source "peer" too ("peer result <id> from <peer>"), which wakes it
// from runtime.wait. Requests follow A2A's task states: submitted, working,
// input_required (the peer asked its parent a question, which the parent answers by
// sending the request again), then one final state of completed, failed, canceled or
// rejected.
//
// Every decision is recorded before it is acted on: a request, a result, a cancellation,
// a peer's opening or stopping is committed, with the records both sessions' streams
// show, before the peer or the parent is told. A session addresses only its own peers,
// and a peer only the requests addressed to it: anything else is not_found, never
// another session's data.
package peer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/evidence"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// The methods this package serves, and their aliases.
const (
	OpenMethod         = "peer.open"
	OpenAlias          = "agents.open" // peer.open by another name
	SendMethod         = "peer.send"
	SendAlias          = "peer.message" // peer.send by another name
	ResultMethod       = "peer.result"
	SubmitResultMethod = "peer.submit_result"
	CancelMethod       = "peer.cancel"
	GetMethod          = "peer.get"
	ListMethod         = "peer.list"
	StopMethod         = "peer.stop"
)

// Bounds.
const (
	MaxPeers        = 16 // peers of one session not stopped
	MaxDepth        = 3  // peers of peers: a peer of depth MaxDepth opens none
	MaxOpenRequests = 64 // requests to one peer not in a final state
	MaxEvidenceRefs = 64 // evidence refs of one open or send
	MaxContentBytes = 65536
	// MaxResultBytes bounds a result's JSON: half a frame, so that peer.result's reply
	// carrying it, with its envelope, always fits one (wire.MaxFrameSize).
	MaxResultBytes = wire.MaxFrameSize / 2
	// MaxInlineResultBytes is the most of a result the parent's input carries as its
	// text; a larger one is named there, and read with peer.result.
	MaxInlineResultBytes = 16384
	// MaxWaitMS bounds peer.result's wait_ms, as runtime.wait bounds its seconds.
	MaxWaitMS = 600000
	// DrainTimeout is how long a draining peer has for its open requests to end before
	// it is stopped with them cancelled.
	DrainTimeout = 10 * time.Minute
)

// ModeIndependent is the one mode: a fresh namespace and transcript.
const ModeIndependent = "independent"

// Request states, as A2A's tasks have them.
const (
	StateSubmitted     = "submitted"
	StateWorking       = "working"
	StateInputRequired = "input_required"
	StateCompleted     = "completed"
	StateFailed        = "failed"
	StateCanceled      = "canceled"
	StateRejected      = "rejected"
)

// Final says whether a request state is final: nothing changes it.
func Final(state string) bool {
	switch state {
	case StateCompleted, StateFailed, StateCanceled, StateRejected:
		return true
	}
	return false
}

// Peer states as the record keeps them.
const (
	PeerOpen     = "open"
	PeerDraining = "draining" // refuses requests; stops once its open ones end
	PeerStopped  = "stopped"
)

// Activities of a peer's session, as peer.get shows them.
const (
	ActivityIdle    = "idle"    // nothing runs
	ActivityWorking = "working" // a turn or a cell runs
	ActivityWaiting = "waiting" // its agent waits in runtime.wait
	ActivityStopped = "stopped"
)

// Error codes of refused requests, beyond host's.
const (
	CodeNotFound         = "not_found"          // no such peer or request of the caller's
	CodeConflict         = "conflict"           // a request or result id given again with other contents
	CodeCanceled         = "canceled"           // a result for a request its parent cancelled
	CodePeerLimit        = "peer_limit"         // MaxPeers are open
	CodeDepthLimit       = "depth_limit"        // a peer of MaxDepth opens no peer
	CodeOpenRequestLimit = "open_request_limit" // MaxOpenRequests are open
	CodePeerStopped      = "peer_stopped"       // the peer is stopped or draining
	CodePeerUnavailable  = "peer_unavailable"   // the peer's session could not be opened
)

// Sessions is what the service needs of the daemon's sessions.
type Sessions interface {
	// Open opens the session name, which the record holds as a peer of parent, and
	// starts its runtime (and agent).
	Open(ctx context.Context, parent, name string) error
	// Deliver decides the attention of ev, an input of session name, and wakes the
	// session's agent for it.
	Deliver(ctx context.Context, name string, ev store.Event) error
	// Stop stops session name: its running cell and turn are interrupted, its
	// runtime closed.
	Stop(ctx context.Context, name, reason string) error
	// Activity says what session name does now: an Activity* constant, "" for a
	// session the daemon does not hold.
	Activity(name string) string
}

// Config configures a Service.
type Config struct {
	Store    *store.Store
	Sessions Sessions
	// Dir is where the peer contract is written (as ContractFile): the data directory's
	// own directory for peers.
	Dir    string
	Logger *slog.Logger // nil discards
}

// ContractFile is the peer contract's file name in Config.Dir.
const ContractFile = "contract.md"

// Contract is the peer contract: what a peer's instructions add to its parent's.
const Contract = `# peer contract

You are a peer: a session another session (your parent) opened to work on its requests.
A request reaches you as an input framed "[<time> · peer request <id> from <parent>]".
Answer each once, from a cell:

    await runtime.request("peer.submit_result", request_id="<id>", result=<any JSON value>)

Pass state="failed" or state="rejected" to say you could not or would not do it, or
state="input_required" with your question as the result: your parent's answer comes as
the same request again.
An input "peer cancel <id>" means the parent no longer wants that result: stop working
on it; a result submitted after it is refused.
`

// Service serves the peer.* methods of every session of one daemon.
type Service struct {
	store    *store.Store
	sessions Sessions
	contract string
	log      *slog.Logger

	ctx    context.Context // the background work's; cancelled by Close
	cancel context.CancelFunc
	work   sync.WaitGroup // deliveries and stops under way

	mu     sync.Mutex
	drains map[int64]*time.Timer // draining peers' deadlines, by peer row
	closed bool
}

// New returns the service, with the peer contract written under cfg.Dir.
func New(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("peer: %w", err)
	}
	path := filepath.Join(cfg.Dir, ContractFile)
	if err := os.WriteFile(path, []byte(Contract), 0o600); err != nil {
		return nil, fmt.Errorf("peer: contract: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{store: cfg.Store, sessions: cfg.Sessions, contract: path, log: cfg.Logger, ctx: ctx, cancel: cancel,
		drains: map[int64]*time.Timer{}}, nil
}

// ContractPath is the file of the peer contract, an instruction source of every peer.
func (s *Service) ContractPath() string { return s.contract }

// IsPeer says whether session name is a peer: its instructions take the contract.
func (s *Service) IsPeer(ctx context.Context, name string) (bool, error) {
	_, err := s.store.PeerByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Close stops the service's background work: deliveries, stops and drain deadlines.
// The record keeps every deadline; Recover sets them again.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	for id, t := range s.drains {
		t.Stop()
		delete(s.drains, id)
	}
	s.mu.Unlock()
	s.cancel()
	s.work.Wait()
}

// background runs fn on the service's own goroutine, unless the service is closed.
func (s *Service) background(fn func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.work.Go(func() { fn(s.ctx) })
}

// deliver tells session name of its input ev, in the background: the input is durable
// already, and a host that dies first decides its attention as the session opens next.
func (s *Service) deliver(name string, ev store.Event) {
	s.background(func(ctx context.Context) {
		if err := s.sessions.Deliver(ctx, name, ev); err != nil && ctx.Err() == nil {
			s.log.Warn("telling a session of a peer input", "session", name, "event", ev.ID, "err", err)
		}
	})
}

// refusal is an error a service turns into its reply.
type refusal struct{ reply wire.Reply }

func (r refusal) Error() string { return r.reply.Code + ": " + r.reply.Message }

// refuse is a refusal of code.
func refuse(code, format string, args ...any) error {
	return refusal{host.Error(code, format, args...)}
}

// outcome is the reply of err, a refusal or a failure to record.
func outcome(err error) host.Outcome {
	var r refusal
	if errors.As(err, &r) {
		return host.Reply(r.reply)
	}
	return host.Reply(host.Error(host.CodeStoreFailed, "recording: %v", err))
}

// commit is an Outcome computing its reply in the recording transaction, where a
// refusal is an error reply rather than a failed transaction.
func commit(fn func(tx *store.Tx, req *host.Request) (any, error)) host.Outcome {
	return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
		v, err := fn(tx, req)
		var r refusal
		if errors.As(err, &r) {
			return r.reply, nil
		}
		if err != nil {
			return wire.Reply{}, err
		}
		return host.OK(v), nil
	}}
}

// checkRefs checks and resolves evidence refs within session.
func checkRefs(ctx context.Context, st *store.Store, session int64, refs []string) error {
	if len(refs) > MaxEvidenceRefs {
		return refuse(host.CodeInvalidRequest, "at most %d evidence refs, not %d", MaxEvidenceRefs, len(refs))
	}
	for _, r := range evidence.Resolve(ctx, st, session, refs) {
		if r.Error != nil {
			return refuse(host.CodeInvalidRequest, "evidence ref %q does not resolve (%s): %s", r.Ref, r.Error.Code, r.Error.Message)
		}
	}
	return nil
}

// checkContent is why a request's content is refused, or nil.
func checkContent(content string) error {
	switch {
	case strings.TrimSpace(content) == "":
		return refuse(host.CodeInvalidRequest, "content is empty")
	case len(content) > MaxContentBytes:
		return refuse(host.CodeInvalidRequest, "content is %d bytes, over the %d a request carries", len(content), MaxContentBytes)
	case !utf8.ValidString(content):
		return refuse(host.CodeInvalidRequest, "content is not UTF-8")
	}
	return nil
}

// checkResult is the canonical JSON of a result, or why it is refused.
func checkResult(result jsontext.Value) (jsontext.Value, error) {
	if len(result) > MaxResultBytes {
		return nil, refuse(host.CodeInvalidRequest, "the result is %d bytes of JSON, over the %d a result carries", len(result), MaxResultBytes)
	}
	canon := result.Clone()
	if err := canon.Canonicalize(); err != nil {
		return nil, refuse(host.CodeInvalidRequest, "the result is not a JSON value: %v", err)
	}
	if len(canon) > MaxResultBytes {
		return nil, refuse(host.CodeInvalidRequest, "the result is %d bytes of JSON, over the %d a result carries", len(canon), MaxResultBytes)
	}
	return canon, nil
}

// digest identifies a request's contents: the same request sent again has the same.
func digest(peer, content string, refs []string) string {
	h := sha256.New()
	for _, part := range append([]string{peer, content}, refs...) {
		fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// peerName is the session name of parent's n-th peer: <parent>.p<n> while that is an
// identifier, else a name of the parent's digest.
func peerName(parent string, n int) string {
	name := fmt.Sprintf("%s.p%d", parent, n)
	if len(name) <= 128 {
		return name
	}
	sum := sha256.Sum256([]byte(parent))
	return fmt.Sprintf("peer-%x.p%d", sum[:8], n)
}

// ownPeer is the caller's peer named name, within tx; anything else is not_found.
func ownPeer(tx *store.Tx, caller int64, name string) (store.Peer, error) {
	sess, err := tx.SessionByName(name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Peer{}, refuse(CodeNotFound, "no peer %q of this session", name)
	}
	if err != nil {
		return store.Peer{}, err
	}
	p, err := tx.PeerBySession(sess.ID)
	if errors.Is(err, store.ErrNotFound) || err == nil && p.ParentID != caller {
		return store.Peer{}, refuse(CodeNotFound, "no peer %q of this session", name)
	}
	return p, err
}

// stateOf is a request's state as callers see it: a submitted request the peer's agent
// has taken is working.
func stateOf(r store.PeerRequest) string {
	if r.State == StateSubmitted && r.Taken {
		return StateWorking
	}
	return r.State
}

// Receipt is what peer.send answers.
type Receipt struct {
	RequestID string `json:"request_id"`
	PeerID    string `json:"peer_id"`
	State     string `json:"state"`
}

// Status is a request as peer.result, peer.cancel and peer.submit_result answer it.
type Status struct {
	RequestID string         `json:"request_id"`
	PeerID    string         `json:"peer_id"`
	State     string         `json:"state"`
	Result    jsontext.Value `json:"result,omitempty"`
	Detail    string         `json:"detail,omitempty"`
	Note      string         `json:"note,omitempty"`
}

func statusOf(r store.PeerRequest) Status {
	return Status{RequestID: r.RequestID, PeerID: r.PeerSession, State: stateOf(r), Result: r.Result, Detail: r.Detail}
}

// Opened is what peer.open answers.
type Opened struct {
	PeerID  string `json:"peer_id"`
	Session string `json:"session"`
	Mode    string `json:"mode"`
	State   string `json:"state"`
}

// The bodies of the peer records both sessions' journals hold.
type (
	openedRecord struct {
		PeerID   string   `json:"peer_id"`
		Parent   string   `json:"parent"`
		Mode     string   `json:"mode"`
		Depth    int      `json:"depth"`
		Evidence []string `json:"evidence"`
	}
	requestRecord struct {
		PeerID    string   `json:"peer_id"`
		Parent    string   `json:"parent"`
		RequestID string   `json:"request_id"`
		State     string   `json:"state"`
		EventID   int64    `json:"event_id"` // the peer's input
		Evidence  []string `json:"evidence"` // its refs, resolved in the parent's session
	}
	resultRecord struct {
		PeerID      string `json:"peer_id"`
		Parent      string `json:"parent"`
		RequestID   string `json:"request_id"`
		State       string `json:"state"`
		ResultBytes int    `json:"result_bytes,omitempty"`
		Detail      string `json:"detail,omitempty"`
	}
	stoppedRecord struct {
		PeerID string `json:"peer_id"`
		Parent string `json:"parent"`
		State  string `json:"state"` // draining or stopped
		Reason string `json:"reason"`
	}
)

// Payload members of the inputs of source peer: one of them names the request.
type (
	requestIdentity struct {
		ID      string `json:"id"`
		Session string `json:"session"`
	}
	resultIdentity struct {
		ID      string `json:"id"`
		Session string `json:"session"`
		State   string `json:"state"`
	}
	requestInput struct {
		Text     string          `json:"text"`
		Request  requestIdentity `json:"peer_request"`
		Evidence []string        `json:"evidence,omitempty"`
	}
	resultInput struct {
		Text   string         `json:"text"`
		Result resultIdentity `json:"peer_result"`
	}
	cancelInput struct {
		Text   string          `json:"text"`
		Cancel requestIdentity `json:"peer_cancel"`
	}
)

// finish puts r in state — a final one, or input_required — with result and detail,
// recording it in both journals and, unless quiet, as an input of the parent, which it
// returns.
func finish(tx *store.Tx, p store.Peer, r *store.PeerRequest, state string, result jsontext.Value, detail string, quiet bool) (*store.Event, error) {
	r.State, r.Result, r.Detail = state, result, detail
	var ev *store.Event
	if !quiet {
		text := detail
		switch {
		case len(result) > MaxInlineResultBytes:
			text = fmt.Sprintf("(a result of %d bytes: read it with peer.result)", len(result))
		case result != nil:
			text = string(result)
		case text == "":
			text = state
		}
		e, err := tx.AppendEvent(p.ParentID, store.SourcePeer, resultInput{Text: text,
			Result: resultIdentity{ID: r.RequestID, Session: p.Session, State: state}})
		if err != nil {
			return nil, err
		}
		ev, r.ResultEventID = &e, &e.ID
	}
	if err := tx.SetPeerRequest(r); err != nil {
		return nil, err
	}
	_, err := tx.AppendPeerRecord(p, store.KindPeerResult, resultRecord{PeerID: p.Session, Parent: p.Parent,
		RequestID: r.RequestID, State: state, ResultBytes: len(result), Detail: detail})
	return ev, err
}

// decodeOr decodes req's parameters into v, or refuses them with usage.
func decodeOr(req *host.Request, v any, ok func() bool, usage string) error {
	if err := req.Decode(v); err != nil || !ok() {
		return refuse(host.CodeInvalidRequest, "%s takes %s", req.Method, usage)
	}
	return nil
}

// waitFor waits for changed to close, until deadline or ctx ends, and says whether it
// closed: whether the wait may go on.
func waitFor(ctx context.Context, changed <-chan struct{}, deadline time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// mustJSON is v as JSON; v is one of this package's records.
func mustJSON(v any) jsontext.Value {
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		panic(fmt.Sprintf("peer: %v", err))
	}
	return data
}
