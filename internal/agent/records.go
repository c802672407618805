package agent

import (
	"math"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/usage"
)

// End reasons: each turn records exactly one.
const (
	EndWaited     = "waited"      // a cell called runtime.wait; the turn ended after it
	EndNoCode     = "no_code"     // the model answered with text alone, after one nudge
	EndCancelled  = "cancelled"   // the turn was cancelled
	EndStepCap    = "step_cap"    // the turn reached its step cap
	EndTokenCap   = "token_cap"   // the turn's calls used its token cap
	EndCostCap    = "cost_cap"    // the turn's calls cost its cost cap
	EndDeadline   = "deadline"    // the turn ran past its deadline
	EndModelError = "model_error" // a model call failed
	EndOverflow   = "overflow"    // the next request would not fit the context window
	EndStuck      = "stuck"       // the same code failed the same way StuckRepeats times
	EndHostDied   = "host_died"   // the host died during the turn (written by the next start)
)

// Purposes of a model call.
const (
	PurposeStep  = "step"
	PurposeNudge = "nudge"
	PurposeFold  = "fold"
)

// Record is one of the agent's records: a turn's start or end, a model call, a fold.
type Record interface {
	// Kind is the record's journal kind.
	Kind() string
	// TurnID is the turn the record belongs to.
	TurnID() int64
}

// TurnStart opens a turn.
type TurnStart struct {
	Turn      int64     `json:"turn"`
	Trigger   []int64   `json:"trigger_input_ids"`
	StartedAt time.Time `json:"started_at"`
	// HeaderDigest is the digest of the instruction text the turn's requests carry.
	HeaderDigest string `json:"header_digest,omitzero"`
}

// TurnEnd closes a turn with its one end reason and what its calls used.
type TurnEnd struct {
	Turn      int64     `json:"turn"`
	EndedAt   time.Time `json:"ended_at"`
	EndReason string    `json:"end_reason"`
	// Detail says more about the end reason: the error, the cap.
	Detail string `json:"detail,omitzero"`
	Steps  int    `json:"steps"`
	Totals Totals `json:"totals"`
}

// ModelCall is one model call, failed or not.
type ModelCall struct {
	Turn    int64  `json:"turn"`
	Seq     int    `json:"seq"` // within the turn, from 1
	Purpose string `json:"purpose"`
	Route   string `json:"route"`
	Model   string `json:"model,omitzero"`
	// PrefixDigest is the digest of what this request shares with the previous one of
	// the session: the previous request whole, when this one extends it.
	PrefixDigest string `json:"prefix_digest"`
	// RequestDigest is the digest of this request's system text, summary and messages.
	RequestDigest string `json:"request_digest"`
	// Extends says whether the request is the previous one with messages appended.
	Extends  bool `json:"extends"`
	Messages int  `json:"messages"`
	// Images counts the images the request showed the model.
	Images     int          `json:"images,omitzero"`
	StopReason string       `json:"stop_reason,omitzero"`
	LatencyMs  int64        `json:"latency_ms"`
	Usage      *usage.Usage `json:"usage,omitzero"`
	CostMicros *int64       `json:"cost_micros,omitzero"`
	Text       string       `json:"text,omitzero"` // the model's text: scratch, never delivered
	Code       string       `json:"code,omitzero"`
	// DroppedCalls counts the tool calls of the reply after its first, which no step ran.
	DroppedCalls int             `json:"dropped_calls,omitzero"`
	Error        string          `json:"error,omitzero"`
	Failures     []route.Failure `json:"failures,omitzero"`
	// UsageProblem says why the usage object the route sent was not read.
	UsageProblem string `json:"usage_problem,omitzero"`
	// Charged is what the call counts against the caps; nil for a failed call.
	Charged *Charge `json:"charged,omitzero"`
}

// Charge is what a call counts against the caps: its tokens and cost where its route
// reported them, and where it did not, an upper bound — the prompt at the route's
// highest input price, and the reply at its output bound unless reported.
type Charge struct {
	Tokens int64 `json:"tokens"`
	Micros int64 `json:"cost_micros"`
	// Bound says the charge is an upper bound, the route not having reported all.
	Bound bool `json:"bound,omitzero"`
	// Unpriced says the cost could not be bounded: a price it needs is absent. Micros
	// then counts only what was priced.
	Unpriced bool `json:"unpriced,omitzero"`
}

// charge is what a call with usage u and cost (nil when not computed) is charged at
// price: promptBound and outputBound stand for the counts u lacks.
func charge(u *usage.Usage, cost *int64, p Price, promptBound, outputBound int64) Charge {
	var d usage.Usage
	if u != nil {
		d = u.WithDerived()
	}
	var c Charge
	prompt, output := promptBound, outputBound
	if d.PromptTokens != nil {
		prompt = d.PromptTokens.Value
	} else {
		c.Bound = true
	}
	if d.CompletionTokens != nil {
		output = d.CompletionTokens.Value
	} else {
		c.Bound = true
	}
	c.Tokens = prompt + output
	if cost != nil {
		c.Micros = *cost
		return c
	}
	c.Bound = true
	in, ok := p.highestInput()
	total := 0.0
	if prompt > 0 {
		if !ok {
			c.Unpriced = true
		}
		total += float64(prompt) * in
	}
	if output > 0 {
		if p.Output == nil {
			c.Unpriced = true
		} else {
			total += float64(output) * *p.Output
		}
	}
	c.Micros = int64(math.Min(math.Ceil(total), math.MaxInt64/2))
	return c
}

// highestInput is the highest of the route's input prices, ok false when it has none.
func (p Price) highestInput() (float64, bool) {
	best, ok := 0.0, false
	for _, q := range []*float64{p.Input, p.CachedInput, p.CacheWrite} {
		if q != nil && (!ok || *q > best) {
			best, ok = *q, true
		}
	}
	return best, ok
}

// Ledger keeps what calls were charged in the current UTC day. It is safe for
// concurrent use: agents given one ledger share one day cap.
type Ledger struct {
	mu     sync.Mutex
	day    string
	spent  int64
	seeded map[string]bool // the sessions whose recorded spending of the day is in spent
}

func dayOf(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Add charges micros at now.
func (l *Ledger) Add(now time.Time, micros int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(now, micros)
}

func (l *Ledger) add(now time.Time, micros int64) {
	if d := dayOf(now); d != l.day {
		l.day, l.spent, l.seeded = d, 0, nil
	}
	l.spent += micros
}

// Spent is what was charged in now's day.
func (l *Ledger) Spent(now time.Time) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if dayOf(now) != l.day {
		return 0
	}
	return l.spent
}

// seed adds what session's record says was charged today, as its agent starts: once a
// day per session, since what its agent charged after that was added as it went.
func (l *Ledger) seed(now time.Time, session string, micros int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.add(now, 0)
	if l.seeded[session] {
		return
	}
	if l.seeded == nil {
		l.seeded = map[string]bool{}
	}
	l.seeded[session] = true
	l.spent += micros
}

// Fold records a fold: what it covered, the summary, and the head's move.
type Fold struct {
	Turn         int64  `json:"turn"` // the turn it preceded, or, Selected, ended
	Covers       int    `json:"covers_messages"`
	Summary      string `json:"summary"`
	HeaderBefore string `json:"header_digest_before,omitzero"`
	HeaderAfter  string `json:"header_digest_after,omitzero"`
	HeadReason   string `json:"head_reason,omitzero"`
	TokensBefore int64  `json:"tokens_before"`
	// Selected says the agent asked for it (frontier.select), at the end of its turn.
	Selected bool `json:"selected,omitzero"`
	// Operator says the operator asked for it between turns (kiln sessions fold or
	// reset); Turn is then the last turn that ran.
	Operator bool `json:"operator,omitzero"`
	// Reset says it began a new transcript segment without a summary: the conversation
	// was dropped, not summarized, and no model call was made.
	Reset bool `json:"reset,omitzero"`
	// LeftOut counts the oldest messages the fold's request left out to fit the window.
	LeftOut int `json:"left_out_messages,omitzero"`
	// Error says why the fold failed; the conversation was then kept as it was, and
	// RetryTurn is the first turn that tries again.
	Error     string `json:"error,omitzero"`
	RetryTurn int64  `json:"retry_turn,omitzero"`
}

// Kind implements Record.
func (*TurnStart) Kind() string { return "turn.start" }

// Kind implements Record.
func (*TurnEnd) Kind() string { return "turn.end" }

// Kind implements Record.
func (*ModelCall) Kind() string { return "model_call" }

// Kind implements Record.
func (*Fold) Kind() string { return "fold" }

// TurnID implements Record.
func (r *TurnStart) TurnID() int64 { return r.Turn }

// TurnID implements Record.
func (r *TurnEnd) TurnID() int64 { return r.Turn }

// TurnID implements Record.
func (r *ModelCall) TurnID() int64 { return r.Turn }

// TurnID implements Record.
func (r *Fold) TurnID() int64 { return r.Turn }

// Totals sum the usage of calls. A count is absent when no call reported it; Calls
// counts the calls summed, Partial those whose usage or cost was absent.
type Totals struct {
	Calls        int    `json:"calls"`
	InputTokens  *int64 `json:"input_tokens,omitzero"`
	CachedTokens *int64 `json:"cached_tokens,omitzero"`
	CacheWrite   *int64 `json:"cache_write_tokens,omitzero"`
	OutputTokens *int64 `json:"output_tokens,omitzero"`
	CostMicros   *int64 `json:"cost_micros,omitzero"`
	// CostAbsent counts the calls whose cost could not be computed.
	CostAbsent int `json:"cost_absent,omitzero"`
	// ChargedTokens and ChargedMicros are what the calls count against the caps (see
	// Charge); Bounded counts the calls charged an upper bound, Unpriced those whose
	// cost could not be bounded.
	ChargedTokens int64 `json:"charged_tokens,omitzero"`
	ChargedMicros int64 `json:"charged_micros,omitzero"`
	Bounded       int   `json:"bounded,omitzero"`
	Unpriced      int   `json:"unpriced,omitzero"`
}

// AddCharge sums a call's charge into t; nil (a failed call) charges nothing.
func (t *Totals) AddCharge(c *Charge) {
	if c == nil {
		return
	}
	t.ChargedTokens += c.Tokens
	t.ChargedMicros += c.Micros
	if c.Bound {
		t.Bounded++
	}
	if c.Unpriced {
		t.Unpriced++
	}
}

// Add sums a call into t.
func (t *Totals) Add(u *usage.Usage, cost *int64) {
	t.Calls++
	if u != nil {
		d := u.WithDerived()
		addCount(&t.InputTokens, d.PromptTokens)
		addCount(&t.CachedTokens, d.CachedPromptTokens)
		addCount(&t.CacheWrite, d.CacheWriteTokens)
		addCount(&t.OutputTokens, d.CompletionTokens)
	}
	if cost == nil {
		t.CostAbsent++
		return
	}
	if t.CostMicros == nil {
		t.CostMicros = new(int64)
	}
	*t.CostMicros += *cost
}

// Tokens is the input and output tokens summed, the quantity a token cap bounds.
func (t Totals) Tokens() int64 {
	var n int64
	if t.InputTokens != nil {
		n += *t.InputTokens
	}
	if t.OutputTokens != nil {
		n += *t.OutputTokens
	}
	return n
}

// HitRate is the cached share of input tokens, ok false when the routes said nothing
// of their cache.
func (t Totals) HitRate() (float64, bool) {
	if t.CachedTokens == nil || t.InputTokens == nil || *t.InputTokens == 0 {
		return 0, false
	}
	return float64(*t.CachedTokens) / float64(*t.InputTokens), true
}

func addCount(dst **int64, c *usage.Count) {
	if c == nil {
		return
	}
	if *dst == nil {
		*dst = new(int64)
	}
	**dst += c.Value
}

// Price is a route's price per million tokens, in dollars, of each kind; nil is unknown.
type Price struct {
	Input, CachedInput, CacheWrite, Output *float64
}

// Cost is what a call cost in micro-dollars at price, or nil when a count it needs or the
// price of a kind of token it used is absent. Prompt tokens not read from the cache are
// billed at Input, those written to it (when the route reports writes) at CacheWrite.
func Cost(u *usage.Usage, p Price) *int64 {
	if u == nil {
		return nil
	}
	d := u.WithDerived()
	if d.PromptTokens == nil || d.CachedPromptTokens == nil || d.CompletionTokens == nil {
		return nil
	}
	cached := d.CachedPromptTokens.Value
	written := int64(0)
	if d.CacheWriteTokens != nil {
		written = d.CacheWriteTokens.Value
	}
	plain := d.PromptTokens.Value - cached - written
	if plain < 0 {
		return nil
	}
	total := 0.0
	for _, term := range []struct {
		n     int64
		price *float64
	}{{plain, p.Input}, {cached, p.CachedInput}, {written, p.CacheWrite}, {d.CompletionTokens.Value, p.Output}} {
		if term.n == 0 {
			continue
		}
		if term.price == nil {
			return nil
		}
		total += float64(term.n) * *term.price // $/Mtok is µ$/token
	}
	if total > math.MaxInt64/2 {
		return nil
	}
	micros := int64(math.Round(total))
	return &micros
}
