// Package maintenance serves maintenance.originate and maintenance.assess: durable work
// items an agent keeps about itself. An item records a purpose, a reason and evidence
// refs (each resolved as evidence.resolve resolves it, within the requesting session),
// and the session and execution that opened it. Assessing it closes it with an outcome
// and records what the assessing session changed in between — release activations,
// orientation adoptions, skills written — so that the record answers why the agent
// changed itself. Items belong to the data directory: every session of it sees them.
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/evidence"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// The methods this package serves.
const (
	OriginateMethod = "maintenance.originate"
	AssessMethod    = "maintenance.assess"
)

// Bounds of a work item.
const (
	MaxTextChars = 4000 // characters of its purpose, and of its reason
	MaxRefs      = 64   // evidence refs it names
	MaxOpenItems = 256  // items open at once in a data directory
)

// Error codes of refused requests, beyond host's.
const (
	CodeOpenItemLimit   = "open_item_limit"   // MaxOpenItems are open: assess one first
	CodeUnknownWorkItem = "unknown_work_item" // no such work item
	CodeWorkItemClosed  = "work_item_closed"  // the item was assessed already
)

// Outcomes of an assessment.
const (
	OutcomeNoChange  = "no-change"
	OutcomeChanged   = "changed"
	OutcomeDeferred  = "deferred"
	OutcomeAbandoned = "abandoned"
)

// Outcomes are the outcomes an assessment may have.
func Outcomes() []string {
	return []string{OutcomeNoChange, OutcomeChanged, OutcomeDeferred, OutcomeAbandoned}
}

// Service serves both methods.
type Service struct {
	// Skills are the skills as they are now, by id and the digest of each body; nil
	// means none are kept. An assessment tells the skills written since its item was
	// originated from them.
	Skills func() (map[string]string, error)
}

// skills are the skills now, by id and digest.
func (s Service) skills() (map[string]string, error) {
	if s.Skills == nil {
		return map[string]string{}, nil
	}
	return s.Skills()
}

// actor is who makes req, once it is recorded.
func actor(req *host.Request) store.Actor {
	return store.Actor{SessionID: req.Session.ID, Session: req.Session.Name, ExecutionID: req.ExecutionID, RequestID: req.ID()}
}

// Originate is the maintenance.originate service.
func (s Service) Originate() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var p struct {
			Purpose      *string  `json:"purpose"`
			Reason       *string  `json:"reason"`
			EvidenceRefs []string `json:"evidence_refs"`
		}
		if err := req.Decode(&p); err != nil || p.Purpose == nil || p.Reason == nil || p.EvidenceRefs == nil {
			return host.Reply(host.Error(host.CodeInvalidRequest,
				`maintenance.originate takes {"purpose": "...", "reason": "...", "evidence_refs": ["event:42", ...]}`))
		}
		if msg := checkText("purpose", *p.Purpose); msg != "" {
			return host.Reply(host.Error(host.CodeInvalidRequest, "%s", msg))
		}
		if msg := checkText("reason", *p.Reason); msg != "" {
			return host.Reply(host.Error(host.CodeInvalidRequest, "%s", msg))
		}
		if len(p.EvidenceRefs) > MaxRefs {
			return host.Reply(host.Error(host.CodeInvalidRequest, "at most %d evidence refs, not %d", MaxRefs, len(p.EvidenceRefs)))
		}
		for _, r := range evidence.Resolve(ctx, req.Router().Store(), req.Session.ID, p.EvidenceRefs) {
			if r.Error != nil {
				return host.Reply(host.Error(host.CodeInvalidRequest, "evidence ref %q does not resolve (%s): %s",
					r.Ref, r.Error.Code, r.Error.Message))
			}
		}
		skills, err := s.skills()
		if err != nil {
			return host.Reply(host.Error(host.CodeStoreFailed, "reading the skills: %v", err))
		}
		return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
			it := store.WorkItem{Purpose: *p.Purpose, Reason: *p.Reason, EvidenceRefs: p.EvidenceRefs, Origin: actor(req), Skills: skills}
			err := tx.OpenWorkItem(&it, MaxOpenItems)
			if errors.Is(err, store.ErrOverLimit) {
				return host.Error(CodeOpenItemLimit, "%d work items are open, the most a data directory keeps: "+
					"assess one (maintenance.assess) before opening another", MaxOpenItems), nil
			}
			if err != nil {
				return wire.Reply{}, err
			}
			return host.OK(it), nil
		}}
	})
}

// checkText is why a purpose or reason is refused, or "".
func checkText(name, text string) string {
	switch n := utf8.RuneCountInString(text); {
	case strings.TrimSpace(text) == "":
		return name + " is empty"
	case n > MaxTextChars:
		return fmt.Sprintf("%s is %d characters, over the %d a work item keeps", name, n, MaxTextChars)
	}
	return ""
}

// ParseID reads a work item id, w-<n>.
func ParseID(s string) (int64, bool) {
	num, ok := strings.CutPrefix(s, "w-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return n, err == nil && n > 0 && store.WorkItemID(n) == s
}

// Assess is the maintenance.assess service.
func (s Service) Assess() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var p struct {
			WorkItemID string `json:"work_item_id"`
			Outcome    string `json:"outcome"`
		}
		if err := req.Decode(&p); err != nil || p.WorkItemID == "" || p.Outcome == "" {
			return host.Reply(host.Error(host.CodeInvalidRequest,
				`maintenance.assess takes {"work_item_id": "w-1", "outcome": "no-change|changed|deferred|abandoned"}`))
		}
		if !validOutcome(p.Outcome) {
			return host.Reply(host.Error(host.CodeInvalidRequest, "outcome %q is none of %s", p.Outcome, strings.Join(Outcomes(), ", ")))
		}
		id, ok := ParseID(p.WorkItemID)
		if !ok {
			return host.Reply(host.Error(CodeUnknownWorkItem, "%q is not a work item id, such as w-1", p.WorkItemID))
		}
		skills, err := s.skills()
		if err != nil {
			return host.Reply(host.Error(host.CodeStoreFailed, "reading the skills: %v", err))
		}
		return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
			it, err := tx.AssessWorkItem(id, p.Outcome, actor(req), skills)
			switch {
			case errors.Is(err, store.ErrNotFound):
				return host.Error(CodeUnknownWorkItem, "no work item %s in this data directory", p.WorkItemID), nil
			case errors.Is(err, store.ErrClosedItem):
				return host.Error(CodeWorkItemClosed, "%v", err), nil
			case err != nil:
				return wire.Reply{}, err
			}
			return host.OK(it), nil
		}}
	})
}

func validOutcome(o string) bool {
	for _, v := range Outcomes() {
		if o == v {
			return true
		}
	}
	return false
}
