// Package orientation serves orientation.stage, orientation.current and
// orientation.adopt: the texts that orient an agent, staged as candidates and adopted
// into an instruction source of the header. A candidate is for every session of the
// data directory (scope global) or for the caller's session alone (scope session); a
// session runs under its own scope's adoption, else the global one. An adoption is
// idempotent by its operation id, and compares on the candidate's base — the adoption
// current when it was staged — so two racing adoptions cannot both win.
//
// Adopting changes the instruction text of the sessions it applies to. The change is
// observed (the header's rule 2): in the adopting session, as made by the adopting
// execution; in the others, as the host's, with what is known of the adoption. It moves
// into the head at the session's next fold (rule 3).
package orientation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/instructions"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wire"
)

// The methods this package serves.
const (
	StageMethod   = "orientation.stage"
	CurrentMethod = "orientation.current"
	AdoptMethod   = "orientation.adopt"
)

// Targets are the instruction sources a candidate may be adopted into, by source name:
// only orientation, rendered after kiln's contract, the workspace's AGENTS.md and the
// configured sources. AGENTS.md is the user's file, and the contract kiln's.
func Targets() []string { return []string{instructions.OrientationSource} }

// Bounds.
const (
	MaxTextBytes  = 64 << 10 // an orientation text
	MaxCandidates = 256      // candidates staged and not adopted, in a data directory
)

// Error codes of refused requests, beyond host's.
const (
	CodeUnknownCandidate = "unknown_candidate"    // no such candidate, or one of another session
	CodeConflict         = "orientation_conflict" // another adoption came first: stage again
	CodeOperationReused  = "operation_reused"     // the operation id adopted another candidate
	CodeCandidateExists  = "candidate_exists"     // the candidate id was staged with other contents
	CodeCandidateLimit   = "candidate_limit"      // MaxCandidates are staged and not adopted
)

// scopeParam is a request's scope: {"kind":"global"} or {"kind":"session"}, the
// caller's.
type scopeParam struct {
	Kind string `json:"kind"`
}

// scope is the store's scope of p for the requesting session, or a refusal.
func scope(p *scopeParam, req *host.Request) (store.Scope, string) {
	const want = `scope is {"kind": "global"} (every session of the data directory) or {"kind": "session"} (this one)`
	switch {
	case p == nil:
		return store.Scope{}, want
	case p.Kind == store.ScopeGlobal:
		return store.GlobalScope, ""
	case p.Kind == store.ScopeSession:
		return store.SessionScope(req.Session), ""
	}
	return store.Scope{}, want
}

// target is the target named, the default when none is, or a refusal.
func target(t *string) (string, string) {
	if t == nil {
		return instructions.OrientationSource, ""
	}
	if !slices.Contains(Targets(), *t) {
		return "", fmt.Sprintf("target %q is not one a candidate is adopted into: %s", *t, strings.Join(Targets(), ", "))
	}
	return *t, ""
}

// where is the target and scope a request names, or why they are refused.
func where(t *string, p *scopeParam, req *host.Request) (string, store.Scope, string) {
	tgt, msg := target(t)
	if msg != "" {
		return "", store.Scope{}, msg
	}
	sc, msg := scope(p, req)
	return tgt, sc, msg
}

// actor is who makes req, once it is recorded.
func actor(req *host.Request) store.Actor {
	return store.Actor{SessionID: req.Session.ID, Session: req.Session.Name, ExecutionID: req.ExecutionID, RequestID: req.ID()}
}

// Stage is the orientation.stage service.
func Stage(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		CandidateID string      `json:"candidate_id"`
		Text        *string     `json:"text"`
		Target      *string     `json:"target"`
		Scope       *scopeParam `json:"scope"`
	}
	if err := req.Decode(&p); err != nil || p.Text == nil {
		return host.Reply(host.Error(host.CodeInvalidRequest,
			`orientation.stage takes {"candidate_id": "c", "text": "...", "target": "orientation", "scope": {"kind": "global"|"session"}}`))
	}
	if !wire.ValidIdentifier(p.CandidateID) {
		return host.Reply(host.Error(host.CodeInvalidRequest, "candidate_id %q is not 1..128 of [A-Za-z0-9_.-]", p.CandidateID))
	}
	if n := len(*p.Text); n > MaxTextBytes {
		return host.Reply(host.Error(host.CodeInvalidRequest, "the text is %d bytes, over the %d an orientation text holds", n, MaxTextBytes))
	}
	tgt, sc, msg := where(p.Target, p.Scope, req)
	if msg != "" {
		return host.Reply(host.Error(host.CodeInvalidRequest, "%s", msg))
	}
	return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
		c := store.Candidate{CandidateID: p.CandidateID, Text: *p.Text, Target: tgt, Scope: sc,
			Digest: transcript.Digest(*p.Text), StagedBy: actor(req)}
		_, err := tx.StageCandidate(&c, MaxCandidates)
		switch {
		case errors.Is(err, store.ErrCandidateExists):
			return host.Error(CodeCandidateExists, "%v: stage it under another id", err), nil
		case errors.Is(err, store.ErrOverLimit):
			return host.Error(CodeCandidateLimit, "%v, the most a data directory keeps", err), nil
		case err != nil:
			return wire.Reply{}, err
		}
		return host.OK(c), nil
	}}
}

// Current is the orientation.current service: the current adoption of a scope (and
// target), or null.
func Current(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		Scope  *scopeParam `json:"scope"`
		Target *string     `json:"target"`
	}
	if err := req.Decode(&p); err != nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, `orientation.current takes {"scope": {"kind": "global"|"session"}}`))
	}
	tgt, sc, msg := where(p.Target, p.Scope, req)
	if msg != "" {
		return host.Reply(host.Error(host.CodeInvalidRequest, "%s", msg))
	}
	a, found, err := req.Router().Store().CurrentAdoption(ctx, sc.SessionID, tgt)
	if err != nil {
		return host.Reply(host.Error(host.CodeStoreFailed, "%v", err))
	}
	if !found {
		return host.Reply(host.OK(nil))
	}
	return host.Reply(host.OK(a))
}

// Adopt is the orientation.adopt service.
func Adopt(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		CandidateID string `json:"candidate_id"`
		OperationID string `json:"operation_id"`
	}
	if err := req.Decode(&p); err != nil || p.CandidateID == "" || p.OperationID == "" {
		return host.Reply(host.Error(host.CodeInvalidRequest, `orientation.adopt takes {"candidate_id": "c", "operation_id": "op-1"}`))
	}
	if !wire.ValidIdentifier(p.OperationID) {
		return host.Reply(host.Error(host.CodeInvalidRequest, "operation_id %q is not 1..128 of [A-Za-z0-9_.-]", p.OperationID))
	}
	return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
		a, _, err := tx.AdoptCandidate(p.CandidateID, p.OperationID, actor(req))
		switch {
		case errors.Is(err, store.ErrNotFound):
			return host.Error(CodeUnknownCandidate, "no candidate %q is staged: stage it (orientation.stage) first", p.CandidateID), nil
		case errors.Is(err, store.ErrOtherScope):
			return host.Error(CodeUnknownCandidate, "%v, not this one", err), nil
		case errors.Is(err, store.ErrConflict):
			return host.Error(CodeConflict, "%v: read orientation.current and stage again; nothing changed", err), nil
		case errors.Is(err, store.ErrOperationReused):
			return host.Error(CodeOperationReused, "%v; an operation id names one adoption", err), nil
		case err != nil:
			return wire.Reply{}, err
		}
		return host.OK(a), nil
	}}
}

// Sources are the adopted sources session runs under, in the order they are rendered:
// its own scope's adoption of each target, else the global one.
func Sources(ctx context.Context, st *store.Store, session int64) ([]transcript.Source, error) {
	var out []transcript.Source
	for _, t := range Targets() {
		a, found, err := st.SessionOrientation(ctx, session, t)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, transcript.Source{Name: t, Digest: a.Digest, Text: a.Text})
		}
	}
	return out, nil
}

// Reader reads one session's adopted sources, as Sources does, again only once an
// adoption has been made in the data directory since it last read them: adoptions are
// only ever added and a candidate's text never changes, so the newest adoption's id
// names what a read found. Checking it costs half of reading the sources (bench_test.go
// has the A/B); a session reads them at every cell's end. Safe for concurrent use.
type Reader struct {
	st      *store.Store
	session int64

	mu   sync.Mutex
	read bool  // whether last and src hold a read
	last int64 // the newest adoption before src was read
	src  []transcript.Source
}

// NewReader returns a Reader of session's adopted sources in st.
func NewReader(st *store.Store, session int64) *Reader {
	return &Reader{st: st, session: session}
}

// Sources are the adopted sources the session runs under, as Sources returns them.
func (r *Reader) Sources(ctx context.Context) ([]transcript.Source, error) {
	last, err := r.st.LastAdoption(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.read && r.last == last {
		src := slices.Clone(r.src)
		r.mu.Unlock()
		return src, nil
	}
	r.mu.Unlock()
	// Read after last: what is read is at least as new as last names, and a newer
	// adoption makes the next call read again.
	src, err := Sources(ctx, r.st, r.session)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if !r.read || last >= r.last {
		r.read, r.last, r.src = true, last, src
	}
	r.mu.Unlock()
	return slices.Clone(src), nil
}

// Explain says what is known of the adoption session now runs under for source, or ""
// when source is no target or none is adopted: an observation of the change tells it.
func Explain(ctx context.Context, st *store.Store, session int64, source string) string {
	if !slices.Contains(Targets(), source) {
		return ""
	}
	a, found, err := st.SessionOrientation(ctx, session, source)
	if err != nil || !found {
		return ""
	}
	where := "every session"
	if a.Scope.Kind == store.ScopeSession {
		where = "session " + a.Scope.Session
	}
	return fmt.Sprintf("%s is candidate %s, adopted for %s by session %s, execution %s (operation %s, adoption %d)",
		source, a.CandidateID, where, a.By.Session, a.By.ExecutionID, a.OperationID, a.ID)
}
