// Package policy runs an agent's behaviour policy: the release the database's epoch
// names (or kiln's built-in defaults) is loaded by a hooks worker, which answers the two
// decision slots, and every answer is checked against its slot's rules before the host
// acts on it. What a hook cannot decide — it raised, timed out, returned something else —
// falls to a safe default: operator input still wakes the agent, and a send is held.
package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/textcut"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
	kilnpy "github.com/kilnrt/kiln/python"
)

// Bounds of the slots.
const (
	Budget          = 2 * time.Second // one invocation, queueing included
	TopPriority     = 100             // only operator input wakes at it
	MaxDeferSeconds = 86400
	MaxReasonBytes  = 1000
	MaxSendText     = 4000 // characters of one local.send
)

// BuiltinRelease is the revision of kiln's built-in default policy, loaded while no
// release has been activated.
const BuiltinRelease = "builtin"

// Sources the host classifies inputs into; only these are planned.
const (
	SourceOperator       = "operator"
	SourceDiscordDM      = "discord.dm"
	SourceDiscordMention = "discord.mention"
	SourceDiscordAmbient = "discord.ambient"
)

// Attention is an attention.plan decision as the host acts on it.
type Attention struct {
	Action   string   `json:"action"` // wake, defer or ignore
	Priority *int     `json:"priority,omitempty"`
	Seconds  *float64 `json:"seconds,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	// Note says what the host changed or supplied, and why, when the hook's own decision
	// was not taken as it was.
	Note string `json:"note,omitempty"`
}

// Review is a delivery.review decision as the host acts on it.
type Review struct {
	Action string `json:"action"` // allow or hold
	Reason string `json:"reason,omitempty"`
}

// Config says how to start a policy's hooks workers.
type Config struct {
	Python    string
	Package   *kilnpy.Installer // with kiln.hooks and kiln_hooks; nil: the embedded sources
	SessionID string
	ReleaseID string // BuiltinRelease, or a release identity
	Release   string // the release's directory; "" for the built-in defaults
	Logger    *slog.Logger
}

// Policy is one release's hooks, served by successive generations of its hooks worker:
// a generation that times out or dies is replaced at the next invocation.
type Policy struct {
	cfg   Config
	epoch int64 // the behavior epoch that made it active
	calls atomic.Int64

	mu          sync.Mutex
	current     *worker.Worker
	generations int
	closed      bool
}

// New is the policy of cfg's release; its first invocation starts its hooks worker.
func New(cfg Config) *Policy {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Policy{cfg: cfg}
}

// Start loads cfg's release in a hooks worker now, through its handshake, so that a
// release whose hooks do not import is refused here.
func Start(ctx context.Context, cfg Config) (*Policy, error) {
	p := New(cfg)
	if _, err := p.live(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Epoch is the behavior epoch that made the policy active.
func (p *Policy) Epoch() int64 { return p.epoch }

// ReleaseID is the identity of the release the policy serves.
func (p *Policy) ReleaseID() string { return p.cfg.ReleaseID }

// live is the current hooks generation, started if there is none.
func (p *Policy) live(ctx context.Context) (*worker.Worker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("policy: closed")
	}
	if p.current != nil && p.current.State() != worker.Dead {
		return p.current, nil
	}
	p.generations++
	w, err := worker.Start(ctx, worker.Config{
		Python: p.cfg.Python, Package: p.cfg.Package, SessionID: p.cfg.SessionID,
		Generation: "h-" + strconv.Itoa(p.generations), Role: wire.RoleHooks,
		ReleaseID: p.cfg.ReleaseID, Release: p.cfg.Release, Logger: p.cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("policy: release %s: %w", p.cfg.ReleaseID, err)
	}
	p.current = w
	return w, nil
}

// invoke asks the current generation (started if need be) to decide slot.
func (p *Policy) invoke(ctx context.Context, slot string, input any) (jsontext.Value, error) {
	w, err := p.live(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(Budget) // a generation's start is not the hook's time
	data, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("policy: %s input: %w", slot, err)
	}
	id := "i-" + strconv.FormatInt(p.calls.Add(1), 10)
	return w.Invoke(ctx, id, slot, data, time.Until(deadline))
}

// Close shuts the policy's hooks worker down.
func (p *Policy) Close() {
	p.mu.Lock()
	w := p.current
	p.closed, p.current = true, nil
	p.mu.Unlock()
	if w != nil {
		w.Shutdown(worker.DefaultShutdownGrace)
	}
}

// Plan decides an input's attention. The source is the host's classification; the hook
// cannot suppress operator attention, nor give another source operator priority.
func (p *Policy) Plan(ctx context.Context, eventID int64, source string, receivedAtMs int64) Attention {
	if !planned(source) {
		return Attention{Action: "ignore", Reason: "source " + strconv.Quote(source) + " is not one the host plans",
			Note: "not planned: unclassified source"}
	}
	value, err := p.invoke(ctx, wire.SlotAttentionPlan, map[string]any{
		"event_id": eventID, "source": source, "received_at_ms": receivedAtMs})
	var a Attention
	if err == nil {
		a, err = checkAttention(value)
	}
	if err != nil {
		return fallbackAttention(source, err)
	}
	return enforceAttention(source, a)
}

func planned(source string) bool {
	switch source {
	case SourceOperator, SourceDiscordDM, SourceDiscordMention, SourceDiscordAmbient:
		return true
	}
	return false
}

// checkAttention reads a hook's attention decision, refusing what breaks its shape.
func checkAttention(value jsontext.Value) (Attention, error) {
	var a Attention
	if err := json.Unmarshal(value, &a, json.RejectUnknownMembers(true)); err != nil {
		return Attention{}, fmt.Errorf("policy: attention.plan returned %s: %w", value, err)
	}
	if a.Note != "" {
		return Attention{}, errors.New("policy: attention.plan may not write the host's note")
	}
	switch {
	case a.Action == "wake" && a.Priority != nil && a.Seconds == nil && a.Reason == "":
		if *a.Priority < 0 || *a.Priority > TopPriority {
			return Attention{}, fmt.Errorf("policy: wake priority %d is not in 0..%d", *a.Priority, TopPriority)
		}
	case a.Action == "defer" && a.Seconds != nil && a.Priority == nil && a.Reason == "":
		if !(*a.Seconds > 0 && *a.Seconds <= MaxDeferSeconds) {
			return Attention{}, fmt.Errorf("policy: defer seconds %v is not in (0, %d]", *a.Seconds, MaxDeferSeconds)
		}
	case a.Action == "ignore" && a.Priority == nil && a.Seconds == nil:
		if a.Reason == "" || len(a.Reason) > MaxReasonBytes {
			return Attention{}, fmt.Errorf("policy: ignore needs a reason of 1..%d bytes", MaxReasonBytes)
		}
	default:
		return Attention{}, fmt.Errorf("policy: attention.plan returned %s, not wake {priority}, defer {seconds} or ignore {reason}", value)
	}
	return a, nil
}

// enforceAttention applies the host's rules to a well-formed decision.
func enforceAttention(source string, a Attention) Attention {
	switch {
	case source == SourceOperator && a.Action != "wake":
		return topWake("operator attention cannot be suppressed: the hook's " + a.Action + " was overridden")
	case source == SourceOperator && *a.Priority != TopPriority:
		return topWake("operator input wakes at top priority: the hook's " + strconv.Itoa(*a.Priority) + " was raised")
	case source != SourceOperator && a.Action == "wake" && *a.Priority >= TopPriority:
		priority := TopPriority - 1
		a.Priority = &priority
		a.Note = "only operator input wakes at top priority: lowered to " + strconv.Itoa(priority)
	}
	return a
}

// fallbackAttention is the decision when the hook gave none that holds.
func fallbackAttention(source string, err error) Attention {
	note := "attention.plan unavailable: " + bound(err.Error())
	if source == SourceOperator {
		return topWake(note)
	}
	seconds := 60.0
	return Attention{Action: "defer", Seconds: &seconds, Note: note}
}

func topWake(note string) Attention {
	top := TopPriority
	return Attention{Action: "wake", Priority: &top, Note: note}
}

// Review decides whether text may be said to the operator. Text outside 1..MaxSendText
// characters, or not UTF-8, is held without asking the hook; so is everything the hook
// does not plainly allow.
func (p *Policy) Review(ctx context.Context, effectID int64, text string) Review {
	if n := utf8.RuneCountInString(text); !utf8.ValidString(text) || n == 0 || n > MaxSendText {
		return Review{Action: "hold", Reason: fmt.Sprintf("the text must be 1..%d characters of UTF-8", MaxSendText)}
	}
	value, err := p.invoke(ctx, wire.SlotDeliveryReview, map[string]any{
		"effect_id": effectID, "destination": SourceOperator, "text": text})
	if err != nil {
		return Review{Action: "hold", Reason: "delivery.review unavailable: " + bound(err.Error())}
	}
	var r Review
	if err := json.Unmarshal(value, &r, json.RejectUnknownMembers(true)); err != nil {
		return Review{Action: "hold", Reason: "delivery.review returned " + bound(string(value))}
	}
	switch {
	case r.Action == "allow" && r.Reason == "":
		return r
	case r.Action == "hold" && r.Reason != "" && len(r.Reason) <= MaxReasonBytes:
		return r
	}
	return Review{Action: "hold", Reason: "delivery.review returned " + bound(string(value)) + ", not allow or hold {reason}"}
}

// bound cuts text to MaxReasonBytes on a character boundary.
func bound(text string) string { return textcut.Ellipsis(text, MaxReasonBytes) }
