package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/approval"
	"github.com/kilnrt/kiln/internal/serve"
)

// MaxDecisionBodyBytes bounds the body of an approval or a rejection: a reason, which
// the record keeps cut to approval.MaxReasonBytes.
const MaxDecisionBodyBytes = 64 << 10

// decisionRequest is the body of POST /v1/executions/{eid}/approve and /reject.
type decisionRequest struct {
	Reason string `json:"reason"`
}

func (a *api) approve(w http.ResponseWriter, r *http.Request) { a.decide(w, r, true) }

func (a *api) reject(w http.ResponseWriter, r *http.Request) { a.decide(w, r, false) }

// decide approves or rejects the held cell the path names: the decision as recorded,
// or 409 not_held.
func (a *api) decide(w http.ResponseWriter, r *http.Request, approve bool) {
	var req decisionRequest
	if p := decode(w, r, &req, MaxDecisionBodyBytes, true); p != nil {
		writeProblem(w, p)
		return
	}
	s, x := a.execution(w, r)
	if x == nil {
		return
	}
	d, err := s.Decide(r.Context(), x.Cell(), approve, req.Reason)
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// heldList is the body of GET /v1/sessions/{sid}/held.
type heldList struct {
	Held []approval.Review `json:"held"`
}

func (a *api) held(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	held, err := s.Held(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	if held == nil {
		held = []approval.Review{}
	}
	writeJSON(w, http.StatusOK, heldList{Held: held})
}

// resumeReply is the body of POST /v1/sessions/{sid}/turn:resume's answer.
type resumeReply struct {
	Turn  int64  `json:"turn"`  // the turn resumed
	Input int64  `json:"input"` // the input that resumes it
	Ref   string `json:"ref"`   // event:<input>
}

// resumeTurn resumes the session's agent's last turn, which ended host_died or overflow.
func (a *api) resumeTurn(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	turn, input, err := s.ResumeTurn(r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resumeReply{Turn: turn, Input: input, Ref: fmt.Sprintf("event:%d", input)})
}

// fold folds the session's agent's conversation now, between turns: the fold's record,
// or 502 fold_failed for a fold that failed (recorded, the conversation kept).
func (a *api) fold(w http.ResponseWriter, r *http.Request) {
	a.operatorFold(w, r, (*serve.Session).Fold)
}

// reset begins a new transcript segment of the session's agent, between turns: the
// record that marks it.
func (a *api) reset(w http.ResponseWriter, r *http.Request) {
	a.operatorFold(w, r, (*serve.Session).Reset)
}

func (a *api) operatorFold(w http.ResponseWriter, r *http.Request, do func(*serve.Session, context.Context) (agent.Fold, error)) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	f, err := do(s, r.Context())
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}
