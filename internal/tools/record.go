package tools

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// MaxRecordedCalls is how many tool calls one recorded program run may make, as many as
// a cell's host requests (host.MaxRequestsPerCell); the next is refused with
// host.CodeRequestLimit, not run and not recorded, and the run goes on.
const MaxRecordedCalls = host.MaxRequestsPerCell

// MaxRecordedCallBytes bounds a recorded call's request, {"method","namespace","name",
// "arguments"} as JSON: what a cell's request frame carries (wire.MaxFrameSize). A
// larger call is refused with host.CodeInvalidRequest, not run and not recorded.
const MaxRecordedCallBytes = wire.MaxFrameSize

// EndWait bounds how long Recorder.End waits for the calls still running when their
// run ended: a tool that ignores its ctx is given up on then, and the run's end answers
// its call (store.ProgramEnd's Unanswered).
const EndWait = 2 * time.Second

// Recorder records the tool calls of one program run in a session of a store, as a
// cell's host requests are: each call is the request Method of execution RunID (with no
// generation), request id r-1, r-2, …, committed before the tool runs; its reply is
// recorded with its time once the call ends. A result over host.MaxReplyBytes is
// refused with host.CodeReplyTooLarge, in the record and to the program alike. A call
// that ends after its run did (End) is answered host.CodeExecutionEnded in the record,
// whatever the tool returned: the program never got it. Its methods are safe for
// concurrent use.
type Recorder struct {
	store   *store.Store
	session int64
	runID   string
	endWait time.Duration

	mu        sync.Mutex
	calls     int
	refused   int64
	open      int           // calls started and not yet ended
	ended     bool          // End was called: the run ended
	drained   chan struct{} // closed when open falls to 0 once ended
	abandoned bool          // End stopped waiting: the record is no longer the recorder's to write
	writing   sync.WaitGroup
}

// NewRecorder is the recorder of run runID of session in st.
func NewRecorder(st *store.Store, session int64, runID string) *Recorder {
	return &Recorder{store: st, session: session, runID: runID, endWait: EndWait}
}

// Refused is how many calls were refused without being recorded: past
// MaxRecordedCalls, or over MaxRecordedCallBytes.
func (rec *Recorder) Refused() int64 {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.refused
}

// End says the run ended, and waits for the calls still running to record their
// reply, host.CodeExecutionEnded, up to EndWait; past it, the recorder writes nothing
// more, and the calls still without a reply are for the run's end to answer with
// Unanswered. It is called once, before the run's end is recorded.
func (rec *Recorder) End() {
	rec.mu.Lock()
	rec.ended = true
	if rec.open == 0 {
		rec.mu.Unlock()
		return
	}
	drained := make(chan struct{})
	rec.drained = drained
	rec.mu.Unlock()
	t := time.NewTimer(rec.endWait)
	defer t.Stop()
	select {
	case <-drained:
		return
	case <-t.C:
	}
	rec.mu.Lock()
	rec.abandoned = true
	rec.mu.Unlock()
	rec.writing.Wait() // a reply claimed before it gave up is written before the run's end
}

// Unanswered is the reply recorded for a call of the run that the run's end found
// without one: the run ended before the tool answered.
func (rec *Recorder) Unanswered() store.Reply { return Unanswered(rec.runID) }

// Unanswered is the reply recorded for a call of run runID that the run's end found
// without one: host.CodeExecutionEnded, the run ended before the tool answered.
func Unanswered(runID string) store.Reply {
	r := endedReply(runID)
	return store.Reply{Kind: r.Kind, Code: r.Code, Message: r.Message}
}

// endedReply is the reply to a call of run runID that ended before the tool answered.
func endedReply(runID string) wire.Reply {
	return host.Error(host.CodeExecutionEnded, "run %s ended before the tool answered", runID)
}

// write runs the record's write f, unless End gave up on the calls (then false).
func (rec *Recorder) write(ctx context.Context, f func(tx *store.Tx) error) (bool, error) {
	rec.mu.Lock()
	if rec.abandoned {
		rec.mu.Unlock()
		return false, nil
	}
	rec.writing.Add(1)
	rec.mu.Unlock()
	defer rec.writing.Done()
	return true, rec.store.Update(ctx, f)
}

// done ends a call that started.
func (rec *Recorder) done() {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.open--
	if rec.open == 0 && rec.drained != nil {
		close(rec.drained)
		rec.drained = nil
	}
}

// call records and makes one call of the tool namespace.name of r.
func (rec *Recorder) call(ctx context.Context, r *Registry, namespace, name string, arguments jsontext.Value) (jsontext.Value, error) {
	if len(arguments) == 0 {
		arguments = jsontext.Value("{}")
	}
	body, err := json.Marshal(struct {
		Method    string         `json:"method"`
		Namespace string         `json:"namespace"`
		Name      string         `json:"name"`
		Arguments jsontext.Value `json:"arguments"`
	}{Method, namespace, name, arguments}, json.Deterministic(true))
	if err != nil {
		return nil, &Refusal{Code: host.CodeInvalidRequest, Message: fmt.Sprintf("the call cannot be recorded: %v", err)}
	}
	rec.mu.Lock()
	var refusal wire.Reply
	switch {
	case rec.ended:
		refusal = endedReply(rec.runID) // not counted: the run's end is recorded, or being recorded
	case rec.calls >= MaxRecordedCalls:
		rec.refused++
		refusal = host.Error(host.CodeRequestLimit, "a recorded program run may make at most %d tool calls", MaxRecordedCalls)
	case len(body) > MaxRecordedCallBytes:
		rec.refused++
		refusal = host.Error(host.CodeInvalidRequest, "the call is %d bytes, over the %d a recorded call carries", len(body), MaxRecordedCallBytes)
	}
	if refusal.Kind != "" {
		rec.mu.Unlock()
		return nil, &Refusal{Code: refusal.Code, Message: refusal.Message}
	}
	rec.calls++
	rec.open++
	n := rec.calls
	rec.mu.Unlock()
	defer rec.done()

	// The record is written whether or not the run is still wanted: what was called is
	// recorded with its outcome.
	wctx := context.WithoutCancel(ctx)
	req := store.Request{SessionID: rec.session, ExecutionID: rec.runID, RequestID: "r-" + strconv.Itoa(n),
		Method: Method, Body: body}
	if wrote, err := rec.write(wctx, func(tx *store.Tx) error { return tx.InsertRequest(&req) }); err != nil {
		return nil, &Refusal{Code: host.CodeStoreFailed, Message: fmt.Sprintf("the host could not record the call: %v", err)}
	} else if !wrote {
		ended := endedReply(rec.runID) // the run ended first: the tool does not run
		return nil, &Refusal{Code: ended.Code, Message: ended.Message}
	}
	var reply wire.Reply
	if value, err := r.Call(ctx, namespace, name, arguments); err != nil {
		reply = host.Error(Code(err), "%s", message(err))
	} else {
		reply = host.Bounded(wire.Reply{Kind: wire.ReplyOK, Value: value})
	}
	rec.mu.Lock()
	if rec.ended || ctx.Err() != nil {
		reply = endedReply(rec.runID) // the program is not waiting for it: the run settled
	}
	rec.mu.Unlock()
	wrote, err := rec.write(wctx, func(tx *store.Tx) error {
		return tx.InsertReply(rec.session, req.ID, store.Reply{Kind: reply.Kind, Value: reply.Value, Code: reply.Code, Message: reply.Message})
	})
	if err != nil {
		return nil, &Refusal{Code: host.CodeStoreFailed, Message: fmt.Sprintf("the host could not record the reply: %v", err)}
	}
	if !wrote {
		reply = endedReply(rec.runID) // the run's end answers it
	}
	if reply.Kind != wire.ReplyOK {
		return nil, &Refusal{Code: reply.Code, Message: reply.Message}
	}
	return reply.Value, nil
}

// Refusal is a recorded call's error reply, as the program is given it: the host's
// refusal (the tool did not run, or its answer could not be given) or the tool's error,
// with its reply code.
type Refusal struct {
	Code    string
	Message string
}

func (e *Refusal) Error() string { return e.Code + ": " + e.Message }
