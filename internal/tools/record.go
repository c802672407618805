package tools

import (
	"context"
	"fmt"
	"strconv"
	"sync"

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

// Recorder records the tool calls of one program run in a session of a store, as a
// cell's host requests are: each call is the request Method of execution RunID (with no
// generation), request id r-1, r-2, …, committed before the tool runs; its reply is
// recorded with its time once the call ends. A result over host.MaxReplyBytes is
// refused with host.CodeReplyTooLarge, in the record and to the program alike. Its
// methods are safe for concurrent use.
type Recorder struct {
	store   *store.Store
	session int64
	runID   string

	mu      sync.Mutex
	calls   int
	refused int64
}

// NewRecorder is the recorder of run runID of session in st.
func NewRecorder(st *store.Store, session int64, runID string) *Recorder {
	return &Recorder{store: st, session: session, runID: runID}
}

// Refused is how many calls were refused without being recorded: past
// MaxRecordedCalls, or over MaxRecordedCallBytes.
func (rec *Recorder) Refused() int64 {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.refused
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
	case rec.calls >= MaxRecordedCalls:
		refusal = host.Error(host.CodeRequestLimit, "a recorded program run may make at most %d tool calls", MaxRecordedCalls)
	case len(body) > MaxRecordedCallBytes:
		refusal = host.Error(host.CodeInvalidRequest, "the call is %d bytes, over the %d a recorded call carries", len(body), MaxRecordedCallBytes)
	}
	if refusal.Kind != "" {
		rec.refused++
		rec.mu.Unlock()
		return nil, &Refusal{Code: refusal.Code, Message: refusal.Message}
	}
	rec.calls++
	n := rec.calls
	rec.mu.Unlock()

	// The record is written whether or not the run is still wanted: what was called is
	// recorded with its outcome.
	wctx := context.WithoutCancel(ctx)
	req := store.Request{SessionID: rec.session, ExecutionID: rec.runID, RequestID: "r-" + strconv.Itoa(n),
		Method: Method, Body: body}
	if err := rec.store.Update(wctx, func(tx *store.Tx) error { return tx.InsertRequest(&req) }); err != nil {
		return nil, &Refusal{Code: host.CodeStoreFailed, Message: fmt.Sprintf("the host could not record the call: %v", err)}
	}
	var reply wire.Reply
	if value, err := r.Call(ctx, namespace, name, arguments); err != nil {
		reply = host.Error(Code(err), "%s", message(err))
	} else {
		reply = host.Bounded(wire.Reply{Kind: wire.ReplyOK, Value: value})
	}
	if err := rec.store.Update(wctx, func(tx *store.Tx) error {
		return tx.InsertReply(rec.session, req.ID, store.Reply{Kind: reply.Kind, Value: reply.Value, Code: reply.Code, Message: reply.Message})
	}); err != nil {
		return nil, &Refusal{Code: host.CodeStoreFailed, Message: fmt.Sprintf("the host could not record the reply: %v", err)}
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
