package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/wire"
)

// Call is one host request, in the scope of the cell that made it.
type Call struct {
	ExecutionID string         // the cell whose code made the request
	RequestID   string         // the request's identity within the generation
	Method      string         // the request's "method"
	Request     jsontext.Value // the whole request object, "method" included
}

// Handler answers host requests. Serve's ctx ends when the cell that made the request
// ends; a reply that comes later is discarded by the worker.
type Handler interface {
	Serve(ctx context.Context, call Call) wire.Reply
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call Call) wire.Reply

// Serve calls f.
func (f HandlerFunc) Serve(ctx context.Context, call Call) wire.Reply { return f(ctx, call) }

// UnknownMethods is the Handler of a host that offers no methods: every request is
// answered with the error code unknown_method.
type UnknownMethods struct{}

// Serve refuses call.
func (UnknownMethods) Serve(_ context.Context, call Call) wire.Reply {
	return UnknownMethod(call.Method)
}

// UnknownMethod is the reply to a request for a method the host does not have.
func UnknownMethod(method string) wire.Reply {
	return wire.Reply{Kind: wire.ReplyError, Code: "unknown_method",
		Message: fmt.Sprintf("the host has no method %q", method)}
}

// newCall reads a request's method.
func newCall(m wire.HostRequest) (Call, error) {
	var head struct {
		Method *string `json:"method"`
	}
	if err := json.Unmarshal(m.Request, &head); err != nil {
		return Call{}, fmt.Errorf("request: %w", err)
	}
	if head.Method == nil || *head.Method == "" {
		return Call{}, errors.New(`request has no "method" string`)
	}
	return Call{ExecutionID: m.ExecutionID, RequestID: m.ID, Method: *head.Method, Request: m.Request}, nil
}
