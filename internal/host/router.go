// Package host routes the host requests that cell code makes (await runtime.<method>(…))
// to the services that answer them, under the specification's scope rules: an effect
// requires the current live execution of the current generation; an ended, interrupted
// or yielded execution, or an old generation, is refused with its own error code; a
// foreground cell makes at most MaxRequestsPerCell requests; an unknown method is
// unknown_method. Every request and its reply are recorded in the store, and a write a
// reply depends on commits before the reply is sent; a reply that depends on no write
// is recorded through the store's backlog (store.RecordAnswered), durably and at once.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// MaxRequestsPerCell is how many host requests one foreground cell may make; the next is
// refused with CodeRequestLimit and the cell goes on.
const MaxRequestsPerCell = 128

// Error codes of refused requests.
const (
	CodeUnknownMethod        = "unknown_method"        // no service has the method
	CodeInvalidRequest       = "invalid_request"       // the request's fields are wrong
	CodeRequestLimit         = "request_limit"         // the cell made MaxRequestsPerCell already
	CodeExecutionEnded       = "execution_ended"       // its cell has ended: a task outlived it
	CodeExecutionInterrupted = "execution_interrupted" // its cell was interrupted
	CodeExecutionYielded     = "execution_yielded"     // its cell ended its turn with a wait
	CodeUnknownExecution     = "unknown_execution"     // no such execution in this session
	CodeStaleGeneration      = "stale_generation"      // the generation is not the current one
	CodeStoreFailed          = "store_failed"          // the record could not be written
	CodeReplyTooLarge        = "reply_too_large"       // the answer would not fit in one frame
)

// MaxReplyBytes bounds a reply's value (or error message): what is left of a frame
// (wire.MaxFrameSize) once the envelope is around it. A larger answer is refused with
// CodeReplyTooLarge, and the refusal is what is recorded and sent.
const MaxReplyBytes = wire.MaxFrameSize - 4<<10

// Bounded is reply, or its refusal with CodeReplyTooLarge if it would not fit in a frame.
func Bounded(reply wire.Reply) wire.Reply {
	if n := len(reply.Value) + len(reply.Message); n > MaxReplyBytes {
		return Error(CodeReplyTooLarge, "the answer is %d bytes, over the %d a reply carries: ask for less at a time", n, MaxReplyBytes)
	}
	return reply
}

// Service answers the requests of one method.
type Service interface {
	Serve(ctx context.Context, req *Request) Outcome
}

// ServiceFunc adapts a function to Service.
type ServiceFunc func(ctx context.Context, req *Request) Outcome

// Serve calls f.
func (f ServiceFunc) Serve(ctx context.Context, req *Request) Outcome { return f(ctx, req) }

// Outcome is a service's answer: a Reply, or Commit, which computes the reply inside the
// transaction that records it, so that what the reply depends on commits with it.
type Outcome struct {
	Reply  wire.Reply
	Commit func(tx *store.Tx, req *Request) (wire.Reply, error)
	// Committed, when set, is told the reply once everything is recorded, before it is
	// sent.
	Committed func(reply wire.Reply)
}

// Reply is an Outcome of a reply.
func Reply(r wire.Reply) Outcome { return Outcome{Reply: r} }

// OK is an ok reply carrying v as JSON.
func OK(v any) wire.Reply {
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		return Error(CodeStoreFailed, "encoding the reply: %v", err)
	}
	return wire.Reply{Kind: wire.ReplyOK, Value: data}
}

// Error is an error reply.
func Error(code, format string, args ...any) wire.Reply {
	return wire.Reply{Kind: wire.ReplyError, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Config configures a Router.
type Config struct {
	Store   *store.Store  // where requests and replies are recorded
	Session store.Session // the session whose workbench it serves
	Logger  *slog.Logger  // nil discards
}

// Router is a worker.Handler that applies the scope rules, records, and dispatches to
// services by method.
type Router struct {
	store    *store.Store
	session  store.Session
	log      *slog.Logger
	services map[string]Service

	immediate map[string]bool // methods served on the worker's reader

	mu         sync.Mutex
	generation string            // the current generation
	scopes     map[string]*scope // the live foreground execution, by execution id
	sandbox    any               // what confines the current generation; runtime.inspect shows it
}

// scope is what the router knows of a foreground execution while it runs.
type scope struct {
	requests    int
	yielded     bool
	interrupted bool
}

// New returns a Router with the runtime.inspect service; Handle adds the others.
func New(cfg Config) *Router {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Router{store: cfg.Store, session: cfg.Session, log: cfg.Logger,
		services: map[string]Service{}, immediate: map[string]bool{}, scopes: map[string]*scope{}}
	r.HandleImmediate("runtime.inspect", ServiceFunc(inspect))
	return r
}

// Handle routes method to s. Register every service before the first request.
func (r *Router) Handle(method string, s Service) {
	r.services[method] = s
	delete(r.immediate, method)
}

// HandleImmediate routes method to s, a service that answers at once from what the host
// holds: it reads, and never acts on the world, waits, or writes but through a plain
// Outcome's reply. The worker's reader serves it itself, without a hand-over.
func (r *Router) HandleImmediate(method string, s Service) {
	r.services[method] = s
	r.immediate[method] = true
}

// Immediate implements worker.Immediate: a method registered with HandleImmediate, and
// any the router refuses for want of a service, are.
func (r *Router) Immediate(method string) bool {
	return r.immediate[method] || r.services[method] == nil
}

// Methods are the methods the router serves, sorted.
func (r *Router) Methods() []string {
	return slices.Sorted(maps.Keys(r.services))
}

// Session is the session the router serves.
func (r *Router) Session() store.Session { return r.session }

// Store is where the router records.
func (r *Router) Store() *store.Store { return r.store }

// SetGeneration makes generation the current one: requests from any other are refused.
func (r *Router) SetGeneration(generation string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.generation = generation
	clear(r.scopes)
}

// SetSandbox sets what confines the current generation, which runtime.inspect shows.
func (r *Router) SetSandbox(applied any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sandbox = applied
}

// confinement is what SetSandbox set.
func (r *Router) confinement() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandbox
}

// Begin opens the scope of foreground execution id of the current generation.
func (r *Router) Begin(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scopes[id] = &scope{}
}

// Interrupting marks execution id as being interrupted: its requests are refused from now.
func (r *Router) Interrupting(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sc := r.scopes[id]; sc != nil {
		sc.interrupted = true
	}
}

// End closes execution id's scope and reports whether the host accepted a wait that ended
// its turn.
func (r *Router) End(id string) (yielded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sc := r.scopes[id]
	delete(r.scopes, id)
	return sc != nil && sc.yielded
}

// Serve implements worker.Handler.
func (r *Router) Serve(ctx context.Context, call worker.Call) wire.Reply {
	req := &Request{
		Session:     r.session,
		Generation:  call.Generation,
		ExecutionID: call.ExecutionID,
		RequestID:   call.RequestID,
		Method:      call.Method,
		Body:        call.Request,
		router:      r,
	}
	req.Received = time.Now()
	if refusal, ok := r.admit(ctx, call, req); !ok {
		return r.finish(ctx, req, Reply(refusal))
	}
	svc := r.services[call.Method]
	if call.Method == "" {
		return r.finish(ctx, req, Reply(Error(CodeInvalidRequest, `the request has no "method" string`)))
	}
	if svc == nil {
		return r.finish(ctx, req, Reply(Error(CodeUnknownMethod, "the host has no method %q", call.Method)))
	}
	return r.finish(ctx, req, svc.Serve(ctx, req))
}

// admit applies the scope rules and counts the request against its cell.
func (r *Router) admit(ctx context.Context, call worker.Call, req *Request) (wire.Reply, bool) {
	r.mu.Lock()
	if call.Generation != r.generation {
		current := r.generation
		r.mu.Unlock()
		return Error(CodeStaleGeneration, "generation %s is not the current generation %s; its scope has ended",
			call.Generation, current), false
	}
	sc := r.scopes[call.ExecutionID]
	switch {
	case sc == nil || !call.Live || ctx.Err() != nil:
		r.mu.Unlock()
		return r.ended(call.ExecutionID), false
	case sc.yielded:
		r.mu.Unlock()
		return Error(CodeExecutionYielded, "execution %s ended its turn with a wait; it can make no more requests", call.ExecutionID), false
	case sc.interrupted:
		r.mu.Unlock()
		return Error(CodeExecutionInterrupted, "execution %s was interrupted; its scope has ended", call.ExecutionID), false
	case sc.requests >= MaxRequestsPerCell:
		r.mu.Unlock()
		return Error(CodeRequestLimit, "a cell may make at most %d host requests", MaxRequestsPerCell), false
	}
	sc.requests++
	req.Count = sc.requests
	r.mu.Unlock()
	return wire.Reply{}, true
}

// ended is the refusal of a request from an execution that is not running.
func (r *Router) ended(id string) wire.Reply {
	e, err := r.store.ExecutionByCell(context.Background(), r.session.ID, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Error(CodeUnknownExecution, "execution %q is not an execution of session %s", id, r.session.Name)
	case err == nil && e.Status == wire.StatusYielded:
		return Error(CodeExecutionYielded, "execution %s ended its turn with a wait; it can make no more requests", id)
	case err == nil && e.Status == wire.StatusInterrupted:
		return Error(CodeExecutionInterrupted, "execution %s was interrupted; its scope has ended", id)
	}
	return Error(CodeExecutionEnded, "execution %s is not the running cell; its scope ended with it", id)
}

// finish records the request (unless a service already did) and its reply, and returns
// the reply once they are recorded: in one transaction with what the reply depends on,
// or, when it depends on no write, through the store's backlog.
func (r *Router) finish(ctx context.Context, req *Request, out Outcome) wire.Reply {
	reply := Bounded(out.Reply)
	var err error
	if out.Commit == nil && out.Committed == nil && !req.recorded {
		err = r.store.RecordAnswered(context.WithoutCancel(ctx), req.record(), store.Reply{
			Kind: reply.Kind, Value: reply.Value, Code: reply.Code, Message: reply.Message})
	} else {
		err = r.store.Update(context.WithoutCancel(ctx), func(tx *store.Tx) error {
			if err := req.insert(tx); err != nil {
				return err
			}
			if out.Commit != nil {
				var err error
				if reply, err = out.Commit(tx, req); err != nil {
					return err
				}
				reply = Bounded(reply)
			}
			return tx.InsertReply(r.session.ID, req.rec.ID, store.Reply{
				Kind: reply.Kind, Value: reply.Value, Code: reply.Code, Message: reply.Message})
		})
	}
	if err != nil {
		r.log.Error("recording a host request", "method", req.Method, "execution", req.ExecutionID, "err", err)
		return Error(CodeStoreFailed, "the host could not record the request: %v", err)
	}
	if out.Committed != nil {
		out.Committed(reply)
	}
	if req.endsTurn {
		r.mu.Lock()
		if sc := r.scopes[req.ExecutionID]; sc != nil {
			sc.yielded = true
		}
		r.mu.Unlock()
	}
	return reply
}

// Request is one host request being served.
type Request struct {
	Session     store.Session
	Generation  string
	ExecutionID string
	RequestID   string
	Method      string
	Body        jsontext.Value // the whole request object
	Received    time.Time
	Count       int // the requests its cell has made, this one included

	router   *Router
	rec      store.Request
	recorded bool
	endsTurn bool
}

// ID is the request's durable id once recorded (request:<id> in evidence), else 0.
func (q *Request) ID() int64 { return q.rec.ID }

// record is the request as the store records it.
func (q *Request) record() store.Request {
	return store.Request{SessionID: q.Session.ID, Generation: q.Generation, ExecutionID: q.ExecutionID,
		RequestID: q.RequestID, Method: q.Method, Body: q.Body, ReceivedAt: q.Received}
}

// insert records the request in tx, once.
func (q *Request) insert(tx *store.Tx) error {
	if q.recorded {
		return nil
	}
	q.rec = q.record()
	if err := tx.InsertRequest(&q.rec); err != nil {
		return err
	}
	q.recorded = true
	return nil
}

// Record commits the request now, together with what fn writes, before the service acts
// on the world: a host that dies during the effect leaves the request and the effect's
// start recorded, and no reply.
func (q *Request) Record(ctx context.Context, fn func(tx *store.Tx) error) error {
	return q.router.store.Update(ctx, func(tx *store.Tx) error {
		wasRecorded := q.recorded
		if err := q.insert(tx); err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			q.recorded = wasRecorded
			return err
		}
		return nil
	})
}

// EndTurn, called from an Outcome's Commit, says the reply ends the execution's turn:
// once the transaction commits, the execution can make no more requests, and its cell is
// recorded as yielded.
func (q *Request) EndTurn() { q.endsTurn = true }

// Decode reads the request's parameters into v, refusing unknown members; "method" is
// always allowed.
func (q *Request) Decode(v any) error {
	var members map[string]jsontext.Value
	if err := json.Unmarshal(q.Body, &members); err != nil {
		return err
	}
	delete(members, "method")
	rest, err := json.Marshal(members)
	if err != nil {
		return err
	}
	return json.Unmarshal(rest, v, json.RejectUnknownMembers(true))
}

// Router is the router serving the request.
func (q *Request) Router() *Router { return q.router }
