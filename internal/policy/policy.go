// Package policy runs an agent's behaviour policy: the release the database's epoch
// names (kiln's initial release before any activation) is loaded by a hooks worker, which
// answers the two decision slots, and every answer is checked against its slot's rules
// before the host acts on it. Every load of a release, the first and every restart,
// recomputes the stored tree's identity and checks its manifest, and the hooks worker
// loads a private copy of what was checked: a stored tree altered on disk is refused, not
// served. What a hook cannot decide — its release was refused, it raised, timed out,
// returned something else — falls to a safe default: operator input still wakes the
// agent, and a send is held.
package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/scratch"
	"github.com/kilnrt/kiln/internal/textcut"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
	kilnpy "github.com/kilnrt/kiln/python"
)

// Bounds of the slots.
const (
	// Budget is one invocation's time from the moment the host asks: waiting for a
	// hooks generation to start and for an earlier invocation both count against it.
	Budget          = 2 * time.Second
	TopPriority     = 100 // only operator input wakes at it
	MaxDeferSeconds = 86400
	MaxReasonBytes  = 1000
	MaxSendText     = 4000 // characters of one local.send
	// MaxReviewCode bounds the code of a cell execution.review is asked about, in
	// bytes; a longer cell is held without asking.
	MaxReviewCode = 65536
	// IdleStop is how long a hooks worker waits without an invocation before it is
	// stopped; the next invocation starts a new generation, within its Budget.
	IdleStop = 60 * time.Second
)

// Sources the host classifies inputs into; only these are planned.
const (
	SourceOperator       = "operator"
	SourcePeer           = "peer" // a peer's request or cancellation, or a result for its parent
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

// Decision is an attention decision as the host records it with its input: the
// decision, and the behavior epoch and release whose policy made it. A decision recorded
// before the record kept them has neither: Epoch nil, Release "".
type Decision struct {
	Attention
	Epoch   *int64
	Release string
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
	// DataDir holds the stored releases, <data>/releases/<id>; "" when there is none.
	DataDir string
	// ReleaseID is the release the policy serves: Initial().ID or a stored release's.
	ReleaseID string
	// Idle is how long a generation may go without an invocation before it is stopped:
	// 0 means IdleStop, a negative value never.
	Idle   time.Duration
	Logger *slog.Logger
	// Forker, when set, forks each hooks worker from a zygote (internal/zygote's
	// Pool), unconfined as a spawned one is; one it cannot fork is spawned.
	Forker worker.Forker
}

// Policy is one release's hooks, served by successive generations of its hooks worker:
// a generation that times out or dies is replaced at the next invocation, and each one
// loads the release afresh, checked.
type Policy struct {
	cfg   Config
	epoch int64 // the behavior epoch that made it active
	calls atomic.Int64

	stop  context.Context // ends a start in progress once the policy is closed
	close context.CancelFunc
	ended sync.WaitGroup // one per generation, until its private tree is removed

	mu          sync.Mutex
	named       []string // the slots the release's manifest names, once read
	current     *generation
	generations int
	closed      bool
	running     int         // invocations under way
	idle        *time.Timer // stops current once no invocation has run for cfg.Idle
	idleArmed   int64       // counts the idle timers set; a timer acts only if it is the last
}

// generation is one hooks worker of a policy, from the start of its start.
type generation struct {
	ready chan struct{} // closed when w or err is set
	w     *worker.Worker
	err   error
}

// over reports whether g has ended or never started; a start in progress is not over.
func (g *generation) over() bool {
	select {
	case <-g.ready:
		return g.err != nil || g.w.State() == worker.Dead
	default:
		return false
	}
}

// ErrClosed is a decision asked of a policy that has been closed.
var ErrClosed = errors.New("policy: closed")

// New is the policy of cfg's release; its first invocation starts its hooks worker.
func New(cfg Config) *Policy {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Idle == 0 {
		cfg.Idle = IdleStop
	}
	p := &Policy{cfg: cfg}
	p.stop, p.close = context.WithCancel(context.Background())
	return p
}

// Start loads cfg's release in a hooks worker now, through its handshake, so that a
// release that is refused or whose hooks do not import is refused here.
func Start(ctx context.Context, cfg Config) (*Policy, error) {
	p := New(cfg)
	done := p.busy()
	defer done() // a worker no decision asks for is stopped once idle
	if _, err := p.live(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Epoch is the behavior epoch that made the policy active.
func (p *Policy) Epoch() int64 { return p.epoch }

// ReleaseID is the identity of the release the policy serves.
func (p *Policy) ReleaseID() string { return p.cfg.ReleaseID }

// snapshot reads the policy's release and checks it: the initial release as built in,
// or the stored tree, whose identity must be the release's and whose manifest must hold.
func (p *Policy) snapshot() (release.Snapshot, error) {
	if initial := Initial(); p.cfg.ReleaseID == initial.ID {
		return initial, nil
	}
	if p.cfg.DataDir == "" {
		return release.Snapshot{}, fmt.Errorf("%w: release %s, but there is no data directory", ErrInvalidRelease, p.cfg.ReleaseID)
	}
	snap, err := release.Open(p.cfg.DataDir, p.cfg.ReleaseID)
	if err == nil {
		_, err = release.ReadManifest(snap)
	}
	if err != nil {
		return release.Snapshot{}, fmt.Errorf("%w: %w", ErrInvalidRelease, err)
	}
	return snap, nil
}

// live is the current hooks generation, started if there is none, once it has started;
// waiting for it ends with ctx.
func (p *Policy) live(ctx context.Context) (*worker.Worker, error) {
	g, err := p.ensure()
	if err != nil {
		return nil, err
	}
	select {
	case <-g.ready:
		return g.w, g.err
	case <-ctx.Done():
		return nil, fmt.Errorf("policy: release %s: waiting for its hooks worker to start: %w", p.cfg.ReleaseID, ctx.Err())
	}
}

// ensure is the current generation, its start begun if there was none or it is over.
func (p *Policy) ensure() (*generation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.current == nil || p.current.over() {
		p.generations++
		p.current = &generation{ready: make(chan struct{})}
		p.ended.Add(1)
		go p.run(p.current, "h-"+strconv.Itoa(p.generations))
	}
	return p.current, nil
}

// run starts generation g, named name, from a checked private copy of the release, and
// removes that copy once g has ended.
func (p *Policy) run(g *generation, name string) {
	defer p.ended.Done()
	tree, slots, err := p.extract()
	if err == nil {
		defer release.RemoveAll(tree)
		g.w, err = worker.Start(p.stop, worker.Config{
			Python: p.cfg.Python, Package: p.cfg.Package, SessionID: p.cfg.SessionID,
			Generation: name, Role: wire.RoleHooks,
			ReleaseID: p.cfg.ReleaseID, Release: tree, Slots: slots, Logger: p.cfg.Logger, Forker: p.cfg.Forker,
		})
		if err != nil {
			err = fmt.Errorf("policy: release %s: %w", p.cfg.ReleaseID, err)
		}
	}
	switch {
	case err != nil && p.stop.Err() != nil: // Close ended the start: nothing failed
		g.err = err
		p.cfg.Logger.Debug("hooks generation start ended by close", "release", p.cfg.ReleaseID, "generation", name)
	case err != nil:
		g.err = err
		p.cfg.Logger.Warn("hooks generation not started", "release", p.cfg.ReleaseID, "generation", name, "err", err)
	}
	close(g.ready)
	if g.w != nil {
		<-g.w.Done()
	}
}

// extract checks the release and writes it to a new private directory; slots are the
// slots its manifest names, which its hooks worker serves.
func (p *Policy) extract() (tree string, slots []string, err error) {
	snap, err := p.snapshot()
	if err != nil {
		return "", nil, err
	}
	m, err := release.ReadManifest(snap)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrInvalidRelease, err)
	}
	tree, err = scratch.Make(scratch.Release)
	if err != nil {
		return "", nil, err
	}
	if err := release.Extract(tree, snap); err != nil {
		release.RemoveAll(tree)
		return "", nil, err
	}
	return tree, m.Slots(), nil
}

// invoke asks the current generation (started if need be) to decide slot, all within
// Budget from now. The caller going away ends neither the wait nor the hook: a hook
// within its budget is never abandoned, which would end its generation.
func (p *Policy) invoke(ctx context.Context, slot string, input any) (jsontext.Value, error) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(Budget)
	defer p.busy()()
	data, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("policy: %s input: %w", slot, err)
	}
	starting, cancel := context.WithDeadline(ctx, deadline)
	w, err := p.live(starting)
	overrun := starting.Err() != nil && ctx.Err() == nil
	cancel()
	left := time.Until(deadline)
	switch {
	case overrun || err == nil && left <= 0:
		return nil, fmt.Errorf("policy: %s: its hooks worker did not start within the budget of %s", slot, Budget)
	case err != nil:
		return nil, err
	}
	id := "i-" + strconv.FormatInt(p.calls.Add(1), 10)
	return w.Invoke(ctx, id, slot, data, left)
}

// busy counts an invocation under way and holds off the idle stop until done is called.
func (p *Policy) busy() (done func()) {
	p.mu.Lock()
	p.running++
	if p.idle != nil {
		p.idle.Stop()
		p.idle = nil
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.running--
		if p.running == 0 && !p.closed && p.cfg.Idle > 0 {
			p.idleArmed++
			armed := p.idleArmed
			p.idle = time.AfterFunc(p.cfg.Idle, func() { p.stopIdle(armed) })
		}
	}
}

// stopIdle shuts the current generation down when armed is the last idle timer set and
// no invocation has begun since. The next invocation starts another generation.
func (p *Policy) stopIdle(armed int64) {
	p.mu.Lock()
	g := p.current
	if p.idle == nil || p.idleArmed != armed || p.running > 0 || p.closed || g == nil {
		p.mu.Unlock()
		return
	}
	p.idle, p.current = nil, nil
	p.mu.Unlock()
	<-g.ready
	if g.w != nil {
		p.cfg.Logger.Debug("hooks worker stopped while idle", "release", p.cfg.ReleaseID, "generation", g.w.Generation(),
			"idle", p.cfg.Idle)
		g.w.Shutdown(worker.DefaultShutdownGrace)
	}
}

// Close shuts the policy's hooks worker down, and waits for its generations to end.
func (p *Policy) Close() {
	p.mu.Lock()
	g := p.current
	p.closed, p.current = true, nil
	if p.idle != nil {
		p.idle.Stop()
		p.idle = nil
	}
	p.mu.Unlock()
	p.close()
	if g != nil {
		<-g.ready
		if g.w != nil {
			g.w.Shutdown(worker.DefaultShutdownGrace)
		}
	}
	p.ended.Wait()
}

// Plan decides an input's attention. The source is the host's classification; the hook
// cannot suppress operator attention, nor give another source operator priority. The
// decision is made within Budget whether or not the caller goes away meanwhile.
func (p *Policy) Plan(ctx context.Context, eventID int64, source string, receivedAtMs int64) Attention {
	if !planned(source) {
		return Attention{Action: "ignore", Reason: "source " + strconv.Quote(source) + " is not one the host plans",
			Note: "not planned: unclassified source"}
	}
	switch {
	case eventID <= 0:
		return fallbackAttention(source, fmt.Sprintf("attention.plan not asked: event_id must be > 0, got %d", eventID))
	case receivedAtMs < 0:
		return fallbackAttention(source, fmt.Sprintf("attention.plan not asked: received_at_ms must be >= 0, got %d", receivedAtMs))
	}
	value, err := p.invoke(ctx, wire.SlotAttentionPlan, map[string]any{
		"event_id": eventID, "source": source, "received_at_ms": receivedAtMs})
	var a Attention
	if err == nil {
		a, err = checkAttention(value)
	}
	if err != nil {
		return fallbackAttention(source, "attention.plan unavailable: "+bound(err.Error()))
	}
	return enforceAttention(source, a)
}

func planned(source string) bool {
	switch source {
	case SourceOperator, SourcePeer, SourceDiscordDM, SourceDiscordMention, SourceDiscordAmbient:
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

// fallbackAttention is the decision when the hook gave none that holds, note saying why.
func fallbackAttention(source string, note string) Attention {
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

// ValidSendText is the one rule for the text of a local.send and of an operator input:
// nil when it is valid UTF-8 of 1..MaxSendText characters, else an error saying which
// part of the rule it breaks.
func ValidSendText(text string) error {
	const rule = "the text must be 1..%d characters of UTF-8; %s"
	switch n := utf8.RuneCountInString(text); {
	case !utf8.ValidString(text):
		return fmt.Errorf(rule, MaxSendText, "it is not UTF-8")
	case n == 0:
		return fmt.Errorf(rule, MaxSendText, "it is empty")
	case n > MaxSendText:
		return fmt.Errorf(rule, MaxSendText, fmt.Sprintf("it has %d", n))
	}
	return nil
}

// Review decides whether text may be said to the operator. Text ValidSendText refuses
// is held without asking the hook; so is everything the hook does not plainly allow. The
// decision is made within Budget whether or not the caller goes away meanwhile.
func (p *Policy) Review(ctx context.Context, effectID int64, text string) Review {
	if err := ValidSendText(text); err != nil {
		return Review{Action: "hold", Reason: err.Error()}
	}
	if effectID <= 0 {
		return Review{Action: "hold", Reason: fmt.Sprintf("delivery.review not asked: effect_id must be > 0, got %d", effectID)}
	}
	value, err := p.invoke(ctx, wire.SlotDeliveryReview, map[string]any{
		"effect_id": effectID, "destination": SourceOperator, "text": text})
	if err != nil {
		return Review{Action: "hold", Reason: "delivery.review unavailable: " + bound(err.Error())}
	}
	return checkReview(wire.SlotDeliveryReview, value)
}

// Names reports whether the policy's release names an entrypoint for slot; a release
// that cannot be read is an error.
func (p *Policy) Names(slot string) (bool, error) {
	p.mu.Lock()
	named := p.named
	p.mu.Unlock()
	if named == nil {
		handlers, err := p.Handlers()
		if err != nil {
			return false, err
		}
		named = slices.Sorted(maps.Keys(handlers))
		p.mu.Lock()
		p.named = named
		p.mu.Unlock()
	}
	return slices.Contains(named, slot), nil
}

// ReviewExecution asks the release's execution.review entrypoint whether cell, of the
// agent's turn, may run code: ok is false when the release names none. A cell over
// MaxReviewCode bytes is held without asking; so is everything the hook does not
// plainly allow, and every cell of a release that cannot be read. The decision is made
// within Budget whether or not the caller goes away meanwhile.
func (p *Policy) ReviewExecution(ctx context.Context, turn int64, cell, code string) (r Review, ok bool) {
	named, err := p.Names(wire.SlotExecutionReview)
	switch {
	case err != nil:
		return Review{Action: "hold", Reason: "execution.review unavailable: " + bound(err.Error())}, true
	case !named:
		return Review{}, false
	case len(code) > MaxReviewCode:
		return Review{Action: "hold", Reason: fmt.Sprintf("execution.review not asked: the cell's code is %d bytes, over %d",
			len(code), MaxReviewCode)}, true
	}
	value, err := p.invoke(ctx, wire.SlotExecutionReview, map[string]any{
		"turn": turn, "cell": cell, "code": strings.ToValidUTF8(code, "\uFFFD")})
	if err != nil {
		return Review{Action: "hold", Reason: "execution.review unavailable: " + bound(err.Error())}, true
	}
	return checkReview(wire.SlotExecutionReview, value), true
}

// checkReview reads a review hook's decision: a plain allow, or hold with a reason of
// 1..MaxReasonBytes; anything else holds, saying what the hook returned.
func checkReview(slot string, value jsontext.Value) Review {
	var r Review
	if err := json.Unmarshal(value, &r, json.RejectUnknownMembers(true)); err != nil {
		return Review{Action: "hold", Reason: slot + " returned " + bound(string(value))}
	}
	switch {
	case r.Action == "allow" && r.Reason == "":
		return r
	case r.Action == "hold" && r.Reason != "" && len(r.Reason) <= MaxReasonBytes:
		return r
	}
	return Review{Action: "hold", Reason: slot + " returned " + bound(string(value)) + ", not allow or hold {reason}"}
}

// bound cuts text to MaxReasonBytes on a character boundary.
func bound(text string) string { return textcut.Ellipsis(text, MaxReasonBytes) }
