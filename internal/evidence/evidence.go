// Package evidence serves evidence.resolve: durable records named by reference —
// event:<id>, execution:<cell id>, request:<id>, wait:<id>, effect:<id> — resolved within
// the requesting session, each ref answered on its own, with a per-ref error for a
// malformed or missing one.
package evidence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// Method is the method this package serves.
const Method = "evidence.resolve"

// MaxRefs is how many refs one request may resolve.
const MaxRefs = 64

// Per-ref error codes.
const (
	CodeMalformed = "malformed" // not kind:id of a known kind
	CodeNotFound  = "not_found" // no such record in this session
)

// Service is the evidence.resolve service.
type Service struct{}

// Result is one ref's answer: Record, or Error.
type Result struct {
	Ref    string    `json:"ref"`
	Kind   string    `json:"kind,omitempty"`
	Record any       `json:"record,omitempty"`
	Error  *RefError `json:"error,omitempty"`
}

// RefError says why a ref did not resolve.
type RefError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Serve implements host.Service.
func (Service) Serve(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		Refs []string `json:"refs"`
	}
	if err := req.Decode(&p); err != nil || p.Refs == nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "evidence.resolve takes refs, an array of strings such as \"event:42\""))
	}
	if len(p.Refs) > MaxRefs {
		return host.Reply(host.Error(host.CodeInvalidRequest, "at most %d refs per request, not %d", MaxRefs, len(p.Refs)))
	}
	results := Resolve(ctx, req.Router().Store(), req.Session.ID, p.Refs)
	return host.Outcome{Reply: host.OK(map[string]any{"results": results})}
}

// Resolve answers each ref against session's records.
func Resolve(ctx context.Context, st *store.Store, session int64, refs []string) []Result {
	out := make([]Result, len(refs))
	for i, ref := range refs {
		out[i] = resolve(ctx, st, session, ref)
	}
	return out
}

func resolve(ctx context.Context, st *store.Store, session int64, ref string) Result {
	res := Result{Ref: ref}
	kind, id, ok := strings.Cut(ref, ":")
	if !ok || id == "" {
		return malformed(res, "a ref is kind:id, such as event:42")
	}
	num, numErr := strconv.ParseInt(id, 10, 64)
	if kind != "execution" && (numErr != nil || num <= 0) {
		return malformed(res, fmt.Sprintf("the id of a %s ref is a positive integer", kind))
	}
	var rec any
	var err error
	switch kind {
	case "event":
		rec, err = st.EventByID(ctx, session, num)
	case "execution":
		if !wire.ValidIdentifier(id) {
			return malformed(res, "the id of an execution ref is its execution id, such as c-3")
		}
		rec, err = st.ExecutionByCell(ctx, session, id)
	case "request":
		var req store.Request
		var reply *store.Reply
		req, reply, err = st.RequestByID(ctx, session, num)
		rec = store.RequestRecord{Request: req, Reply: reply}
	case "wait":
		rec, err = st.WaitByID(ctx, session, num)
	case "effect":
		rec, err = st.EffectByID(ctx, session, num)
	default:
		return malformed(res, fmt.Sprintf("unknown kind %q: refs are event, execution, request, wait or effect", kind))
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		res.Error = &RefError{Code: CodeNotFound, Message: fmt.Sprintf("no %s %s in this session", kind, id)}
	case err != nil:
		res.Error = &RefError{Code: host.CodeStoreFailed, Message: err.Error()}
	default:
		res.Kind, res.Record = kind, rec
	}
	return res
}

func malformed(res Result, msg string) Result {
	res.Error = &RefError{Code: CodeMalformed, Message: msg}
	return res
}
