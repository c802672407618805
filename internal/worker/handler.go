package worker

import (
	"context"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/wire"
)

// Call is one host request, with the facts of its scope the worker alone can judge.
type Call struct {
	Generation  string         // the generation whose worker sent it
	ExecutionID string         // the cell whose code made the request
	RequestID   string         // the request's identity within the generation
	Method      string         // the request's "method"; "" when it has none
	Request     jsontext.Value // the whole request object, "method" included
	// Live says the request named the running foreground cell when it was read, in
	// frame order: a request read after its cell's completion is not live.
	Live bool
}

// Handler answers host requests; it decides every policy, scope included. Serve's ctx
// ends when the cell that made the request ends (at once for a request that is not
// Live); a reply that comes later is discarded by the worker.
type Handler interface {
	Serve(ctx context.Context, call Call) wire.Reply
}

// Immediate is implemented by a Handler that answers some methods at once, waiting on
// nothing outside the host. The worker's reader serves a call of such a method itself, in
// the order the frames arrived, instead of handing it to a goroutine of its own: no
// hand-over between threads delays the reply. A slow immediate method would hold up every
// frame behind it, the cell's completion included.
type Immediate interface {
	Immediate(method string) bool
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call Call) wire.Reply

// Serve calls f.
func (f HandlerFunc) Serve(ctx context.Context, call Call) wire.Reply { return f(ctx, call) }

// UnknownMethods is the Handler of a host that offers no methods: every request is
// answered with the error code unknown_method (invalid_request when it names none).
type UnknownMethods struct{}

// Serve refuses call.
func (UnknownMethods) Serve(_ context.Context, call Call) wire.Reply {
	if call.Method == "" {
		return InvalidRequest(`the request has no "method" string`)
	}
	return UnknownMethod(call.Method)
}

// Immediate reports that every refusal is immediate.
func (UnknownMethods) Immediate(string) bool { return true }

// CodeHostFailed is the error code of a reply the host could not make: its own fault,
// not the request's.
const CodeHostFailed = "host_failed"

// InvalidRequest is the reply to a request the host cannot read.
func InvalidRequest(message string) wire.Reply {
	return wire.Reply{Kind: wire.ReplyError, Code: "invalid_request", Message: message}
}

// UnknownMethod is the reply to a request for a method the host does not have.
func UnknownMethod(method string) wire.Reply {
	return wire.Reply{Kind: wire.ReplyError, Code: "unknown_method",
		Message: fmt.Sprintf("the host has no method %q", method)}
}

// newCall reads a request's method: its "method" member when that is a string. The
// request is valid JSON, as the decoder judged it.
func newCall(m wire.HostRequest, generation string, live bool) Call {
	call := Call{Generation: generation, ExecutionID: m.ExecutionID, RequestID: m.ID, Request: m.Request, Live: live}
	var head struct {
		Method *string `json:"method"` // anything but a string fails, and names no method
	}
	if json.Unmarshal(m.Request, &head) == nil && head.Method != nil {
		call.Method = *head.Method
	}
	return call
}
