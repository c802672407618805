package journal

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/usage"
)

// TurnEndReason is why an agent's turn ended; each turn records exactly one.
type TurnEndReason string

// The reasons a turn ends.
const (
	TurnWaited     TurnEndReason = agent.EndWaited     // a cell called runtime.wait; the turn ended after it
	TurnNoCode     TurnEndReason = agent.EndNoCode     // the model answered with text alone, after one nudge
	TurnCancelled  TurnEndReason = agent.EndCancelled  // the turn was cancelled
	TurnStepCap    TurnEndReason = agent.EndStepCap    // the turn reached its step cap
	TurnTokenCap   TurnEndReason = agent.EndTokenCap   // the turn's calls used its token cap
	TurnCostCap    TurnEndReason = agent.EndCostCap    // the turn's calls cost its cost cap
	TurnDeadline   TurnEndReason = agent.EndDeadline   // the turn ran past its deadline
	TurnModelError TurnEndReason = agent.EndModelError // a model call failed
	TurnOverflow   TurnEndReason = agent.EndOverflow   // the next request would not fit the context window
	TurnStuck      TurnEndReason = agent.EndStuck      // the same code failed the same way too often
	TurnHostDied   TurnEndReason = agent.EndHostDied   // the host died during the turn
)

// Turn is one turn of a session's agent as the durable record holds it.
type Turn struct {
	// Start opens the turn; nil only in a record that lost it.
	Start *TurnStart `json:"start"`
	// End closes the turn; nil while it runs.
	End *TurnEnd `json:"end"`
	// Calls are the turn's model calls, in order, failed ones included.
	Calls []ModelCall `json:"calls"`
	// Folds are the folds that preceded the turn's requests.
	Folds []Fold `json:"folds"`
}

// Totals sums the usage and cost of the turn's calls, a running turn's included.
func (t Turn) Totals() Totals {
	var sum Totals
	for _, c := range t.Calls {
		sum.Add(c)
	}
	return sum
}

// TurnStart opens a turn.
type TurnStart struct {
	// Turn is the turn's number in its session, from 1.
	Turn int64 `json:"turn"`
	// Trigger are the ids of the inputs (events) that started the turn.
	Trigger []int64 `json:"trigger_input_ids"`
	// StartedAt is when the turn began.
	StartedAt time.Time `json:"started_at"`
	// HeaderDigest is the digest of the instruction text the turn's requests carry.
	HeaderDigest string `json:"header_digest,omitzero"`
}

// TurnEnd closes a turn with its one end reason and what its calls used.
type TurnEnd struct {
	// Turn is the turn's number in its session.
	Turn int64 `json:"turn"`
	// EndedAt is when the turn ended.
	EndedAt time.Time `json:"ended_at"`
	// EndReason is why it ended.
	EndReason TurnEndReason `json:"end_reason"`
	// Detail says more about the end reason: the error, the cap.
	Detail string `json:"detail,omitzero"`
	// Steps counts the turn's steps.
	Steps int `json:"steps"`
	// Totals sum the usage of the turn's calls, as the turn's end recorded them.
	Totals Totals `json:"totals"`
}

// ModelCall is one model call of a turn, failed or not.
type ModelCall struct {
	// Turn is the turn the call belongs to.
	Turn int64 `json:"turn"`
	// Seq numbers the call within its turn, from 1.
	Seq int `json:"seq"`
	// Purpose is "step", "nudge" (after an answer without code) or "fold".
	Purpose string `json:"purpose"`
	// Route names the configured route called.
	Route string `json:"route"`
	// Model is the model the route answered with, "" when it did not say.
	Model string `json:"model,omitzero"`
	// PrefixDigest is the digest of what the request shares with the session's previous
	// one: that request whole, when this one extends it.
	PrefixDigest string `json:"prefix_digest"`
	// RequestDigest is the digest of the request's system text, summary and messages.
	RequestDigest string `json:"request_digest"`
	// Extends says whether the request is the previous one with messages appended.
	Extends bool `json:"extends"`
	// Messages counts the request's messages.
	Messages int `json:"messages"`
	// Images counts the images the request showed the model.
	Images int `json:"images,omitzero"`
	// StopReason is why the model stopped, as the route said.
	StopReason string `json:"stop_reason,omitzero"`
	// LatencyMs is the call's wall time, retries included, in milliseconds.
	LatencyMs int64 `json:"latency_ms"`
	// Usage is what the route reported the call used; nil when it reported nothing.
	Usage *Usage `json:"usage,omitzero"`
	// CostMicros is the call's cost in micro-dollars at the route's price; nil when a
	// count it needs or a price was absent.
	CostMicros *int64 `json:"cost_micros,omitzero"`
	// Text is the model's text: scratch, never delivered.
	Text string `json:"text,omitzero"`
	// Code is the code the model answered with, run as the step's cell.
	Code string `json:"code,omitzero"`
	// Error is why the call failed, "" when it did not.
	Error string `json:"error,omitzero"`
	// Failures are the failed attempts, in order.
	Failures []RouteFailure `json:"failures,omitzero"`
	// DroppedCalls counts the tool calls of the reply after its first, which no step ran.
	DroppedCalls int `json:"dropped_calls,omitzero"`
	// UsageProblem says why the usage object the route sent was not read.
	UsageProblem string `json:"usage_problem,omitzero"`
	// Charged is what the call counts against the caps; nil for a failed call.
	Charged *Charge `json:"charged,omitzero"`
}

// RouteFailure is one failed attempt of a model call.
type RouteFailure struct {
	// Status is the HTTP status of the answer, 0 when there was none.
	Status int `json:"status,omitzero"`
	// Error says what failed.
	Error string `json:"error"`
	// RetryAfterNs is how long the answer asked to wait before the next attempt, in
	// nanoseconds.
	RetryAfterNs int64 `json:"retry_after_ns,omitzero"`
}

// Usage is what one model response said it used. A nil count is one the route did not
// report, distinct from a reported zero.
type Usage struct {
	// Shape is the shape the route's usage object was read in: "openai-chat",
	// "openai-responses", "deepseek" or "anthropic".
	Shape string `json:"shape"`
	// PromptTokens is the whole prompt, cached and cache-written tokens included.
	PromptTokens *TokenCount `json:"prompt_tokens,omitzero"`
	// CompletionTokens is the output, reasoning tokens included.
	CompletionTokens *TokenCount `json:"completion_tokens,omitzero"`
	// TotalTokens is the prompt and the output together.
	TotalTokens *TokenCount `json:"total_tokens,omitzero"`
	// CachedPromptTokens is the prompt tokens read from the route's cache.
	CachedPromptTokens *TokenCount `json:"cached_prompt_tokens,omitzero"`
	// CacheWriteTokens is the prompt tokens written to the route's cache.
	CacheWriteTokens *TokenCount `json:"cache_write_tokens,omitzero"`
	// UncachedPromptTokens is the prompt tokens not read from the cache.
	UncachedPromptTokens *TokenCount `json:"uncached_prompt_tokens,omitzero"`
	// UncachedUnwrittenPromptTokens is the prompt tokens neither read from nor written
	// to the cache, as Anthropic reports them; no other shape reports it.
	UncachedUnwrittenPromptTokens *TokenCount `json:"uncached_unwritten_prompt_tokens,omitzero"`
}

// TokenCount is one token count: its value, and whether kiln computed it from other
// counts (Derived) rather than reading it from the route.
type TokenCount struct {
	Value   int64 `json:"value"`            // the number of tokens
	Derived bool  `json:"derived,omitzero"` // computed by kiln from the route's other counts
}

// Fold is a fold of the transcript: what it covered, its summary, and the move of the
// instruction header it made.
type Fold struct {
	// Turn is the turn the fold preceded.
	Turn int64 `json:"turn"`
	// Covers counts the messages the summary replaced.
	Covers int `json:"covers_messages"`
	// Summary is the fold's summary.
	Summary string `json:"summary"`
	// HeaderBefore is the digest of the instruction text before the fold.
	HeaderBefore string `json:"header_digest_before,omitzero"`
	// HeaderAfter is the digest of the instruction text after the fold.
	HeaderAfter string `json:"header_digest_after,omitzero"`
	// HeadReason is why the transcript's head moved at the fold.
	HeadReason string `json:"head_reason,omitzero"`
	// TokensBefore is the size of the request the fold made room in, in tokens.
	TokensBefore int64 `json:"tokens_before"`
	// Selected says the agent asked for the fold (frontier.select): it ended the turn.
	Selected bool `json:"selected,omitzero"`
	// Operator says the operator asked for the fold between turns (kiln sessions fold
	// or reset); Turn is then the last turn that ran.
	Operator bool `json:"operator,omitzero"`
	// Reset says the fold began a new transcript segment without a summary: the
	// conversation was dropped, not summarized, and no model call was made.
	Reset bool `json:"reset,omitzero"`
	// LeftOut counts the oldest messages the fold's request left out to fit the window.
	LeftOut int `json:"left_out_messages,omitzero"`
	// Error says why the fold failed; RetryTurn is the first turn that tries again.
	Error     string `json:"error,omitzero"`
	RetryTurn int64  `json:"retry_turn,omitzero"`
}

// Charge is what a model call counts against the agent's caps: its tokens and cost as
// its route reported them, or an upper bound (Bound) where it did not; Unpriced says a
// price the cost needs is absent.
type Charge struct {
	Tokens   int64 `json:"tokens"`
	Micros   int64 `json:"cost_micros"`
	Bound    bool  `json:"bound,omitzero"`
	Unpriced bool  `json:"unpriced,omitzero"`
}

// Totals sum the usage of model calls. A count is nil when no call reported it.
type Totals struct {
	// Calls counts the calls summed.
	Calls int `json:"calls"`
	// The tokens of the calls, as their routes reported them (or kiln derived them).
	InputTokens  *int64 `json:"input_tokens,omitzero"`       // the prompts, cached and cache-written tokens included
	CachedTokens *int64 `json:"cached_tokens,omitzero"`      // prompt tokens read from the routes' caches
	CacheWrite   *int64 `json:"cache_write_tokens,omitzero"` // prompt tokens written to the routes' caches
	OutputTokens *int64 `json:"output_tokens,omitzero"`      // the output, reasoning included
	// CostMicros sums the costs that could be computed, in micro-dollars.
	CostMicros *int64 `json:"cost_micros,omitzero"`
	// CostAbsent counts the calls whose cost could not be computed.
	CostAbsent int `json:"cost_absent,omitzero"`
	// ChargedTokens and ChargedMicros are what the calls count against the caps;
	// Bounded counts the calls charged an upper bound, Unpriced those not priced.
	ChargedTokens int64 `json:"charged_tokens,omitzero"`
	ChargedMicros int64 `json:"charged_micros,omitzero"`
	Bounded       int   `json:"bounded,omitzero"`
	Unpriced      int   `json:"unpriced,omitzero"`
}

// Add sums the call c into t.
func (t *Totals) Add(c ModelCall) {
	sum := agent.Totals(*t)
	sum.Add(c.Usage.internal(), c.CostMicros)
	sum.AddCharge((*agent.Charge)(c.Charged))
	*t = Totals(sum)
}

// HitRate is the cached share of the input tokens, ok false when the routes said nothing
// of their cache.
func (t Totals) HitRate() (rate float64, ok bool) { return agent.Totals(t).HitRate() }

// Cost is the calls' cost in micro-dollars, ok false unless every call's cost is known.
func (t Totals) Cost() (micros int64, ok bool) {
	if t.CostMicros == nil || t.CostAbsent > 0 {
		return 0, false
	}
	return *t.CostMicros, true
}

// CostText shows the calls' cost in dollars as kiln's tables and transcripts do,
// "$0.000840", or "-" unless every call's cost is known.
func (t Totals) CostText() string {
	micros, ok := t.Cost()
	if !ok {
		return "-"
	}
	return fmt.Sprintf("$%.6f", float64(micros)/1e6)
}

// tokenText shows a token count as kiln's tables and transcripts do: the number, or "-"
// when no route reported it.
func tokenText(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// Turns reads the turns of the agent of session, in order; a session the record does
// not have is ErrNoSession.
func (j *Journal) Turns(ctx context.Context, session string) ([]Turn, error) {
	sess, err := j.session(ctx, session)
	if err != nil {
		return nil, err
	}
	summaries, err := agent.Journal{Store: j.st, Session: sess.ID}.Turns(ctx)
	if err != nil {
		return nil, err
	}
	turns := make([]Turn, len(summaries))
	for i, s := range summaries {
		turns[i] = turnOf(s)
	}
	return turns, nil
}

// RouteUsage is what the model calls of one route in one session used.
type RouteUsage struct {
	Route   string `json:"route"`   // the configured route's name
	Session string `json:"session"` // the session's name
	Totals  Totals `json:"totals"`  // the sums of the route's calls in the session
}

// UsageByRoute sums every model call the agents of the record's sessions made, by route
// and session, sorted by route then session.
func (j *Journal) UsageByRoute(ctx context.Context) ([]RouteUsage, error) {
	sessions, err := j.st.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	names := map[int64]string{}
	for _, s := range sessions {
		names[s.ID] = s.Name
	}
	recs, err := j.st.AgentRecords(ctx, 0)
	if err != nil {
		return nil, err
	}
	type key struct{ route, session string }
	sums := map[key]*agent.Totals{}
	for _, r := range recs {
		if r.Kind != store.KindModelCall {
			continue
		}
		var c agent.ModelCall
		if err := json.Unmarshal(r.Body, &c); err != nil {
			return nil, fmt.Errorf("kiln: agent record %d: %w", r.ID, err)
		}
		k := key{c.Route, names[r.SessionID]}
		if sums[k] == nil {
			sums[k] = &agent.Totals{}
		}
		sums[k].Add(c.Usage, c.CostMicros)
		sums[k].AddCharge(c.Charged)
	}
	out := make([]RouteUsage, 0, len(sums))
	for k, t := range sums {
		out = append(out, RouteUsage{Route: k.route, Session: k.session, Totals: Totals(*t)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Route != out[j].Route {
			return out[i].Route < out[j].Route
		}
		return out[i].Session < out[j].Session
	})
	return out, nil
}

// turnOf is the public form of a turn's records.
func turnOf(s agent.TurnSummary) Turn {
	t := Turn{Calls: make([]ModelCall, len(s.Calls)), Folds: make([]Fold, len(s.Folds))}
	if s.Start != nil {
		start := TurnStart(*s.Start)
		t.Start = &start
	}
	if e := s.End; e != nil {
		t.End = &TurnEnd{Turn: e.Turn, EndedAt: e.EndedAt, EndReason: TurnEndReason(e.EndReason), Detail: e.Detail,
			Steps: e.Steps, Totals: Totals(e.Totals)}
	}
	for i, c := range s.Calls {
		t.Calls[i] = modelCallOf(c)
	}
	for i, f := range s.Folds {
		t.Folds[i] = Fold(f)
	}
	return t
}

// modelCallOf is the public form of a model call's record.
func modelCallOf(c agent.ModelCall) ModelCall {
	m := ModelCall{Turn: c.Turn, Seq: c.Seq, Purpose: c.Purpose, Route: c.Route, Model: c.Model,
		PrefixDigest: c.PrefixDigest, RequestDigest: c.RequestDigest, Extends: c.Extends, Messages: c.Messages,
		Images: c.Images, StopReason: c.StopReason, LatencyMs: c.LatencyMs, Usage: usageOf(c.Usage), CostMicros: c.CostMicros,
		Text: c.Text, Code: c.Code, Error: c.Error, DroppedCalls: c.DroppedCalls, UsageProblem: c.UsageProblem,
		Charged: (*Charge)(c.Charged)}
	for _, f := range c.Failures {
		m.Failures = append(m.Failures, RouteFailure(f))
	}
	return m
}

// usageOf is the public form of u.
func usageOf(u *usage.Usage) *Usage {
	if u == nil {
		return nil
	}
	return &Usage{Shape: u.Shape, PromptTokens: (*TokenCount)(u.PromptTokens), CompletionTokens: (*TokenCount)(u.CompletionTokens),
		TotalTokens: (*TokenCount)(u.TotalTokens), CachedPromptTokens: (*TokenCount)(u.CachedPromptTokens),
		CacheWriteTokens: (*TokenCount)(u.CacheWriteTokens), UncachedPromptTokens: (*TokenCount)(u.UncachedPromptTokens),
		UncachedUnwrittenPromptTokens: (*TokenCount)(u.UncachedUnwrittenPromptTokens)}
}

// internal is u as the usage package reads it.
func (u *Usage) internal() *usage.Usage {
	if u == nil {
		return nil
	}
	return &usage.Usage{Shape: u.Shape, PromptTokens: (*usage.Count)(u.PromptTokens), CompletionTokens: (*usage.Count)(u.CompletionTokens),
		TotalTokens: (*usage.Count)(u.TotalTokens), CachedPromptTokens: (*usage.Count)(u.CachedPromptTokens),
		CacheWriteTokens: (*usage.Count)(u.CacheWriteTokens), UncachedPromptTokens: (*usage.Count)(u.UncachedPromptTokens),
		UncachedUnwrittenPromptTokens: (*usage.Count)(u.UncachedUnwrittenPromptTokens)}
}
