package tools

import (
	"context"
	"errors"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
)

// Method is the host request of a call from a cell:
// {"method":"tools.call","namespace":…,"name":…,"arguments":{…}}.
const Method = "tools.call"

// Error codes of the replies, beside the router's. The cell's call raises
// tools.ToolError carrying the code and the message.
const (
	CodeUnknownTool      = "unknown_tool"      // the registry has no such tool
	CodeInvalidArguments = "invalid_arguments" // the arguments do not match the schema
	CodeToolError        = "tool_error"        // the tool ran and reported an error
	CodeToolUnavailable  = "tool_unavailable"  // its server failed to start, died or broke the protocol
	CodeToolTimeout      = "tool_timeout"      // the call outlasted the call timeout
)

// Service serves Method from a registry.
type Service struct {
	Registry *Registry
}

// Serve calls one tool. The request is recorded before the call, so that a host that
// dies during it leaves the request and no reply; the reply is recorded with its time,
// as every request's is, and counts toward the cell's request cap like any other. The
// call ends with its cell.
func (s Service) Serve(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		Namespace string         `json:"namespace"`
		Name      string         `json:"name"`
		Arguments jsontext.Value `json:"arguments"`
	}
	if err := req.Decode(&p); err != nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "tools.call takes namespace, name and arguments: %v", err))
	}
	if err := req.Record(context.WithoutCancel(ctx), func(*store.Tx) error { return nil }); err != nil {
		return host.Reply(host.Error(host.CodeStoreFailed, "the host could not record the call: %v", err))
	}
	value, err := s.Registry.Call(ctx, p.Namespace, p.Name, p.Arguments)
	if err != nil {
		return host.Reply(host.Error(Code(err), "%s", message(err)))
	}
	return host.Reply(host.OK(value))
}

// Code is the reply code of a call's error.
func Code(err error) string {
	var refusal *Refusal
	switch {
	case errors.As(err, &refusal):
		return refusal.Code
	case errors.Is(err, ErrUnknownTool):
		return CodeUnknownTool
	case errors.Is(err, ErrInvalidArguments):
		return CodeInvalidArguments
	case errors.Is(err, ErrTimeout):
		return CodeToolTimeout
	case errors.Is(err, ErrUnavailable):
		return CodeToolUnavailable
	}
	return CodeToolError
}

// message is what code sees of a call's error: a tool's own message as it is, anything
// else with its context but not the kind its code already says.
func message(err error) string {
	var te *Error
	if errors.As(err, &te) {
		return te.Message
	}
	var refusal *Refusal
	if errors.As(err, &refusal) {
		return refusal.Message
	}
	for _, kind := range []error{ErrUnknownTool, ErrInvalidArguments, ErrTimeout, ErrUnavailable} {
		if errors.Is(err, kind) {
			return strings.TrimPrefix(err.Error(), kind.Error()+": ")
		}
	}
	return err.Error()
}

// Error is a tool's own error: code sees Message, and nothing of kiln's.
type Error struct {
	Message string
}

func (e *Error) Error() string { return e.Message }
