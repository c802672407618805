// Package approval holds an agent's cells for an operator's decision before they run:
// the execution.review decision. A policy of allow lets every cell run unasked, as
// before; a policy of hold holds each cell once its start is recorded, until the
// operator approves it (it runs), rejects it (it never runs, and the model reads the
// rejection as the cell's result), or the hold times out (a rejection too).
//
// Every hold and every decision is in the session's durable record, beside the turn's
// other records: an execution.review record as the cell is held, and one
// execution.decision record as the hold ends — approved, rejected, timeout, cancelled (the
// turn ended first), or abandoned (the host stopped while the cell was held: Recover
// records it as the host starts again).
package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/textcut"
)

// Policies.
const (
	PolicyAllow = "allow" // every cell runs unasked
	PolicyHold  = "hold"  // every cell waits for a decision
)

// DefaultTimeout is how long a held cell waits for a decision unless configured.
const DefaultTimeout = time.Hour

// MaxReasonBytes bounds the reason a decision records; a longer one is cut.
const MaxReasonBytes = 4096

// Decisions a hold ends with.
const (
	Approved  = "approved"
	Rejected  = "rejected"
	Timeout   = "timeout"
	Cancelled = "cancelled"
	Abandoned = "abandoned"
)

// ErrNotHeld is a decision for a cell that is not held now.
var ErrNotHeld = errors.New("approval: the execution is not held")

// ErrRejected is a held cell that may not run: rejected, or its hold timed out.
var ErrRejected = errors.New("rejected")

// Review is the record of a cell held before it ran.
type Review struct {
	Turn       int64     `json:"turn"`
	Cell       string    `json:"cell"`
	Verdict    string    `json:"verdict"` // hold
	Reason     string    `json:"reason"`
	CodeSHA256 string    `json:"code_sha256"`
	TimeoutMs  int64     `json:"timeout_ms"`
	HeldAt     time.Time `json:"held_at"`
}

// Decision is the record of how a hold ended.
type Decision struct {
	Turn      int64     `json:"turn"`
	Cell      string    `json:"cell"`
	Decision  string    `json:"decision"` // Approved, Rejected, Timeout, Cancelled, Abandoned
	Reason    string    `json:"reason,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
}

// Gate is one session's execution.review: it asks the policy about each cell of the
// agent, holds it when told to, and takes the operator's decisions. It is safe for
// concurrent use.
type Gate struct {
	store   *store.Store
	session int64 // the store's id of the session
	policy  string
	timeout time.Duration
	log     *slog.Logger

	mu   sync.Mutex
	held map[string]*hold // by cell id
}

type hold struct {
	review  Review
	decided chan Decision // one send, by whoever takes the hold out of held
}

// New returns the gate of session (its store id) under policy, PolicyAllow when "";
// a held cell waits at most timeout (DefaultTimeout when 0).
func New(st *store.Store, session int64, policy string, timeout time.Duration, log *slog.Logger) (*Gate, error) {
	switch policy {
	case "":
		policy = PolicyAllow
	case PolicyAllow, PolicyHold:
	default:
		return nil, fmt.Errorf("approval: policy %q is not %s or %s", policy, PolicyAllow, PolicyHold)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Gate{store: st, session: session, policy: policy, timeout: timeout, log: log, held: map[string]*hold{}}, nil
}

// Review decides whether cell, of turn, may run code: at once under PolicyAllow; else
// once the operator approves it. A rejection, a timeout or ctx ending first is an error
// (wrapping ErrRejected for the first two), and the cell must not run.
func (g *Gate) Review(ctx context.Context, turn int64, cell, code string) error {
	if g.policy == PolicyAllow {
		return nil
	}
	sum := sha256.Sum256([]byte(code))
	h := &hold{decided: make(chan Decision, 1), review: Review{Turn: turn, Cell: cell, Verdict: "hold",
		Reason: "execution.review holds every cell for the operator", CodeSHA256: hex.EncodeToString(sum[:]),
		TimeoutMs: g.timeout.Milliseconds(), HeldAt: g.store.Now()}}
	if _, err := g.store.AppendAgentRecord(ctx, g.session, store.KindReview, turn, h.review); err != nil {
		return fmt.Errorf("approval: recording the hold of %s: %w", cell, err)
	}
	g.mu.Lock()
	g.held[cell] = h
	g.mu.Unlock()
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	var d Decision
	select {
	case d = <-h.decided:
	case <-timer.C:
		d = g.end(context.WithoutCancel(ctx), cell, Timeout, fmt.Sprintf("no decision within %s", g.timeout))
	case <-ctx.Done():
		d = g.end(context.WithoutCancel(ctx), cell, Cancelled, "the turn ended while the cell was held")
	}
	switch d.Decision {
	case Approved:
		return nil
	case Cancelled:
		return fmt.Errorf("approval: %s was held and the turn ended: %w", cell, context.Cause(ctx))
	case "": // the operator decided as the wait ended otherwise: take what was recorded
		d = <-h.decided
		if d.Decision == Approved {
			return nil
		}
	}
	if d.Reason == "" {
		return fmt.Errorf("%w by the operator", ErrRejected)
	}
	return fmt.Errorf("%w: %s", ErrRejected, d.Reason)
}

// end takes cell's hold out of held, records how it ended, and hands the decision to
// the waiting Review. It returns the zero Decision when cell is no longer held (its hold
// ended otherwise first).
func (g *Gate) end(ctx context.Context, cell, decision, reason string) Decision {
	g.mu.Lock()
	h, ok := g.held[cell]
	delete(g.held, cell)
	g.mu.Unlock()
	if !ok {
		return Decision{}
	}
	d := Decision{Turn: h.review.Turn, Cell: cell, Decision: decision, Reason: cleanReason(reason), DecidedAt: g.store.Now()}
	if _, err := g.store.AppendAgentRecord(ctx, g.session, store.KindDecision, d.Turn, d); err != nil {
		g.log.Error("recording a hold's decision", "cell", cell, "decision", decision, "err", err)
	}
	h.decided <- d
	return d
}

// Decide approves or rejects held cell, saying why (reason may be ""): recorded, then
// told to the waiting cell. A cell not held now is ErrNotHeld.
func (g *Gate) Decide(ctx context.Context, cell string, approve bool, reason string) (Decision, error) {
	decision := Rejected
	if approve {
		decision = Approved
	}
	d := g.end(ctx, cell, decision, reason)
	if d.Decision == "" {
		return Decision{}, fmt.Errorf("%w: %s", ErrNotHeld, cell)
	}
	return d, nil
}

// Held lists the cells held now, oldest first.
func (g *Gate) Held() []Review {
	g.mu.Lock()
	out := make([]Review, 0, len(g.held))
	for _, h := range g.held {
		out = append(out, h.review)
	}
	g.mu.Unlock()
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].HeldAt.Before(out[j-1].HeldAt); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Recover ends, abandoned, every hold the record shows without a decision: the host
// stopped while those cells were held, and they never ran. Call it as the host starts,
// before any Review.
func (g *Gate) Recover(ctx context.Context) error {
	recs, err := g.store.AgentRecords(ctx, g.session)
	if err != nil {
		return err
	}
	open := map[string]Review{}
	var order []string
	for _, r := range recs {
		switch r.Kind {
		case store.KindReview:
			var rv Review
			if err := json.Unmarshal(r.Body, &rv); err != nil {
				return fmt.Errorf("approval: record %d: %w", r.ID, err)
			}
			open[rv.Cell] = rv
			order = append(order, rv.Cell)
		case store.KindDecision:
			var d Decision
			if err := json.Unmarshal(r.Body, &d); err != nil {
				return fmt.Errorf("approval: record %d: %w", r.ID, err)
			}
			delete(open, d.Cell)
		}
	}
	for _, cell := range order {
		rv, ok := open[cell]
		if !ok {
			continue
		}
		delete(open, cell)
		d := Decision{Turn: rv.Turn, Cell: cell, Decision: Abandoned, Reason: "the host stopped while the cell was held; it never ran",
			DecidedAt: g.store.Now()}
		if _, err := g.store.AppendAgentRecord(ctx, g.session, store.KindDecision, d.Turn, d); err != nil {
			return fmt.Errorf("approval: ending the hold of %s: %w", cell, err)
		}
	}
	return nil
}

// cleanReason is reason made valid UTF-8 and cut to MaxReasonBytes.
func cleanReason(reason string) string {
	reason = strings.ToValidUTF8(reason, "\uFFFD")
	if cut, ok := textcut.Prefix(reason, MaxReasonBytes-len("…")); ok && len(reason) > MaxReasonBytes {
		return cut + "…"
	}
	return reason
}
