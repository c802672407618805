// Package approval holds an agent's cells for an operator's decision before they run:
// the execution.review decision. A policy of hold holds each cell once its start is
// recorded; a policy of allow lets every cell run unless the session's behaviour policy
// (its release's execution.review entrypoint, the Hook) holds it. A held cell waits until
// the operator approves it (it runs), rejects it (it never runs, and the model reads the
// rejection as the cell's result), or the hold times out (a rejection too).
//
// Every hold and every decision is in the session's durable record, beside the turn's
// other records: an execution.review record as the hook or the policy decides about a
// cell, and one execution.decision record as a hold ends — approved, rejected, timeout,
// or cancelled (the turn ended first).
//
// A hold outlives the host: when it starts again, Recover holds again every cell the
// record shows held and undecided, until its timeout. The turn that wrote it ended with
// the host, so a decision then is told to the agent as an input, which resumes it: an
// approved cell's code, sent again, runs without a second hold.
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
)

// Verdicts of an execution.review record.
const (
	VerdictAllow = "allow" // the hook let the cell run
	VerdictHold  = "hold"  // the cell waits for a decision
)

// ErrNotHeld is a decision for a cell that is not held now.
var ErrNotHeld = errors.New("approval: the execution is not held")

// ErrRejected is a held cell that may not run: rejected, or its hold timed out.
var ErrRejected = errors.New("rejected")

// Review is the record of the review of a cell before it ran: held, or let run by the
// policy's hook.
type Review struct {
	Turn       int64     `json:"turn"`
	Cell       string    `json:"cell"`
	Verdict    string    `json:"verdict"` // VerdictHold or VerdictAllow
	Reason     string    `json:"reason"`
	CodeSHA256 string    `json:"code_sha256"`
	TimeoutMs  int64     `json:"timeout_ms"`
	HeldAt     time.Time `json:"held_at"`
	// Restarted says that the host restarted while the cell was held: its turn has
	// ended, and a decision resumes it. Held sets it; the record never holds it.
	Restarted bool `json:"restarted,omitzero"`
}

// Decision is the record of how a hold ended.
type Decision struct {
	Turn      int64     `json:"turn"`
	Cell      string    `json:"cell"`
	Decision  string    `json:"decision"` // Approved, Rejected, Timeout, Cancelled
	Reason    string    `json:"reason,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
}

// Hook asks the session's behaviour policy whether cell, written by the agent in turn,
// may run code: hold true (and why) holds it for the operator. ok is false when the
// policy has no execution.review entrypoint, and the gate's policy decides.
type Hook func(ctx context.Context, turn int64, cell, code string) (hold bool, reason string, ok bool)

// Resumed is told how a hold Recover carried over a restart ended, once the decision is
// recorded: the turn that held it has ended, so the agent hears of it as an input.
type Resumed func(ctx context.Context, held Review, d Decision)

// Gate is one session's execution.review: it asks the policy about each cell of the
// agent, holds it when told to, and takes the operator's decisions. It is safe for
// concurrent use.
type Gate struct {
	store   *store.Store
	session int64 // the store's id of the session
	policy  string
	timeout time.Duration
	log     *slog.Logger
	hook    Hook
	resumed Resumed

	mu       sync.Mutex
	held     map[string]*hold  // by cell id
	approved map[string]string // code SHA-256 -> the carried cell approved with it
	closed   bool
}

type hold struct {
	review  Review
	decided chan Decision // one send, by whoever takes the hold out of held
	timer   *time.Timer   // a carried hold's timeout; nil for a hold a Review waits on
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
	return &Gate{store: st, session: session, policy: policy, timeout: timeout, log: log, held: map[string]*hold{},
		approved: map[string]string{}}, nil
}

// Ask makes hook the behaviour policy the gate asks about each cell under PolicyAllow.
// Call it before any Review.
func (g *Gate) Ask(hook Hook) { g.hook = hook }

// Review decides whether cell, of turn, may run code. Code the operator approved in a
// hold carried over a restart runs at once. Under PolicyHold the cell is held; under
// PolicyAllow it runs unless the hook holds it. A held cell runs once the operator
// approves it; a rejection, a timeout or ctx ending first is an error (wrapping
// ErrRejected for the first two), and the cell must not run.
func (g *Gate) Review(ctx context.Context, turn int64, cell, code string) error {
	sum := sha256.Sum256([]byte(code))
	digest := hex.EncodeToString(sum[:])
	if was, ok := g.takeApproved(digest); ok {
		d := Decision{Turn: turn, Cell: cell, Decision: Approved, DecidedAt: g.store.Now(),
			Reason: "its code is that of " + was + ", which the operator approved after the host restarted"}
		if _, err := g.store.AppendAgentRecord(ctx, g.session, store.KindDecision, turn, d); err != nil {
			return fmt.Errorf("approval: recording the approval of %s: %w", cell, err)
		}
		return nil
	}
	reason := "kiln.toml's review = \"hold\" holds every cell for the operator"
	if g.policy == PolicyAllow {
		if g.hook == nil {
			return nil
		}
		hold, why, ok := g.hook(ctx, turn, cell, code)
		if !ok {
			return nil
		}
		if !hold {
			rv := Review{Turn: turn, Cell: cell, Verdict: VerdictAllow, Reason: "execution.review allowed it",
				CodeSHA256: digest, HeldAt: g.store.Now()}
			if _, err := g.store.AppendAgentRecord(ctx, g.session, store.KindReview, turn, rv); err != nil {
				return fmt.Errorf("approval: recording the review of %s: %w", cell, err)
			}
			return nil
		}
		reason = "execution.review: " + cleanReason(why)
	}
	h := &hold{decided: make(chan Decision, 1), review: Review{Turn: turn, Cell: cell, Verdict: VerdictHold,
		Reason: reason, CodeSHA256: digest, TimeoutMs: g.timeout.Milliseconds(), HeldAt: g.store.Now()}}
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
	if h.timer != nil { // carried over a restart: its turn has ended, and no Review waits
		h.timer.Stop()
		if decision == Approved {
			g.mu.Lock()
			g.approved[h.review.CodeSHA256] = cell
			g.mu.Unlock()
		}
		if g.resumed != nil {
			g.resumed(ctx, h.review, d)
		}
	}
	return d
}

// takeApproved takes the approval of a carried hold whose code has digest, once.
func (g *Gate) takeApproved(digest string) (cell string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cell, ok = g.approved[digest]
	delete(g.approved, digest)
	return cell, ok
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

// Recover holds again every cell the record shows held and undecided: the host
// stopped while they were held, and they never ran. Each waits for a decision until
// its hold's timeout, counted from when it was held; one past it is recorded timeout at
// once. resumed, when not nil, is told how each ends. Call Recover as the host starts,
// before any Review, and Close once the agent stops.
func (g *Gate) Recover(ctx context.Context, resumed Resumed) error {
	g.resumed = resumed
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
			if rv.Verdict == VerdictHold {
				open[rv.Cell] = rv
				order = append(order, rv.Cell)
			}
		case store.KindDecision:
			var d Decision
			if err := json.Unmarshal(r.Body, &d); err != nil {
				return fmt.Errorf("approval: record %d: %w", r.ID, err)
			}
			delete(open, d.Cell)
		}
	}
	now := g.store.Now()
	for _, cell := range order {
		rv, ok := open[cell]
		if !ok {
			continue
		}
		delete(open, cell)
		rv.Restarted = true
		left := rv.HeldAt.Add(time.Duration(rv.TimeoutMs) * time.Millisecond).Sub(now)
		h := &hold{review: rv, decided: make(chan Decision, 1)}
		g.mu.Lock()
		g.held[cell] = h
		h.timer = time.AfterFunc(max(left, 0), func() {
			g.mu.Lock()
			closed := g.closed
			g.mu.Unlock()
			if !closed {
				g.end(context.Background(), cell, Timeout, fmt.Sprintf("no decision within %s", time.Duration(rv.TimeoutMs)*time.Millisecond))
			}
		})
		g.mu.Unlock()
	}
	return nil
}

// Close stops the timeouts of the holds Recover carried over; they stay undecided in
// the record, for the next start.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, h := range g.held {
		if h.timer != nil {
			h.timer.Stop()
		}
	}
}

// cleanReason is reason made valid UTF-8 and cut to MaxReasonBytes.
func cleanReason(reason string) string {
	reason = strings.ToValidUTF8(reason, "\uFFFD")
	if cut, ok := textcut.Prefix(reason, MaxReasonBytes-len("…")); ok && len(reason) > MaxReasonBytes {
		return cut + "…"
	}
	return reason
}
