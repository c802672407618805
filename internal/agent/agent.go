// Package agent is the turn loop of a session whose agent acts by writing Python. A turn
// starts on inputs and runs steps; a step is one model call and at most one cell. The
// model is given one tool, python, with one string argument, code; a route without
// tools gives its code as a fenced python block. The cell's stamped result is appended
// and the next step follows, until the turn ends with exactly one end reason (see the
// End constants): a cell that waited, a text-only answer after one nudge, a cap, a
// deadline, a failed model call, an overflow, a stuck loop, or a cancellation.
//
// Requests keep the prompt cache: each is the tool, the pinned instruction header, the
// latest fold's summary, then the conversation since the fold, and the conversation is
// only ever appended to. Each step's request is therefore the previous request plus new
// messages; every model call records the digest of the prefix it shares with the
// previous request and of itself, chained message by message. A failed call adds
// nothing to the conversation.
//
// A fold happens at a turn boundary when the next request would come within the fold
// margin of the route's context window: one model call (purpose fold) summarizes the
// conversation into fixed sections, the summary replaces it, and the head moves to the
// current instruction text — the only place it moves. A session may also ask for a fold
// (frontier.select; see FrontierSession): it happens at the end of the turn. A failed
// fold leaves the session as it was, to fold at a later boundary.
package agent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/transcript"
)

// StuckRepeats is how many times the same code failing with the same error ends a turn.
const StuckRepeats = 3

// BytesPerToken estimates tokens from bytes where no route reported a count.
const BytesPerToken = 3

// Nudge is the user message after a text-only answer, once a turn.
const Nudge = "[kiln] Your reply had no code, so nothing ran and nothing was said to the operator. " +
	"Act by calling the python tool; speak with await runtime.request(\"local.send\", text=...); " +
	"end the turn with await runtime.wait(seconds or None)."

// FoldInstruction asks a fold call for its summary.
const FoldInstruction = "[kiln] Summarize the conversation so far for your own later use, replacing it. " +
	"Use exactly these sections: Goal, Progress, Decisions, Next steps, Files. Keep facts, names, paths and open questions; drop chatter."

// Input is an input the agent reads: an event of the session's durable inbox.
type Input struct {
	ID         int64
	Source     string
	ReceivedAt time.Time
	Payload    jsontext.Value
}

// Cell is how a cell the agent wrote ended.
type Cell struct {
	ID      string
	Status  string // ok, error, yielded (it waited), interrupted, failed
	Output  string // its output's text, joined
	Error   string
	Started time.Time
	Ended   time.Time
	// NotRun says the cell never ran (the host refused it before it started): its
	// result has no running time.
	NotRun bool
	// Notices are observations the host rendered after the cell (a changed header).
	Notices []string
}

// Header is the instruction text requests carry, and its digest.
type Header struct {
	Text   string
	Digest string
}

// Session is what the loop acts through and records to.
type Session interface {
	// ID names the session: the prompt cache key.
	ID() string
	// Execute runs code as the session's next cell; cancelling ctx interrupts it.
	Execute(ctx context.Context, code string) (Cell, error)
	// Pending takes the inputs that arrived since the last taken, to steer a running turn.
	Pending(ctx context.Context) ([]Input, error)
	// MoveHead pins the current instruction text at a fold covering every record before
	// the inputs of keep (every record, when keep is empty), and returns it with the
	// reason the pin records (fold, or fold_covered_revision).
	MoveHead(ctx context.Context, keep []Input) (Header, string, error)
	// Record appends one of the agent's records to the session's durable record.
	Record(ctx context.Context, rec Record) error
}

// FrontierSession is a Session whose agent may ask for a new frontier (frontier.select):
// a fold at the end of the turn, whatever the window.
type FrontierSession interface {
	Session
	// FrontierSelected reports whether a new frontier was asked for and not installed.
	FrontierSelected(ctx context.Context) (bool, error)
	// FrontierInstalled marks what was asked installed by the fold at the end of turn.
	FrontierInstalled(ctx context.Context, turn int64) error
}

// Route is a configured route as the agent uses it.
type Route struct {
	Name          string
	Client        route.Client
	ContextTokens int64 // 0: no window known, no folds
	Price         Price
}

// Config configures an Agent.
type Config struct {
	Step Route
	Fold Route // zero: the step route
	// Header is the pinned instruction text the session's transcript runs under.
	Header           Header
	MaxSteps         int           // 0: no cap
	MaxTurnTokens    int64         // 0: no cap
	MaxTurnCostMicro int64         // 0: no cap
	TurnDeadline     time.Duration // 0: none
	FoldMarginTokens int64
	Logger           *slog.Logger
	Now              func() time.Time
	// OnStep is told each step's progress: a model call begun and ended, a cell begun
	// and ended. It must not block.
	OnStep func(Progress)
}

// Progress is a live line of a turn.
type Progress struct {
	Turn  int64
	Step  int
	What  string // "model_call", "model_reply", "cell", "cell_done", "end"
	Cell  string // the cell id, for cell_done
	Error string
	End   string // the end reason, for end
}

// Agent runs a session's turns, one at a time. It is not safe for concurrent use: the
// session's actor owns it.
type Agent struct {
	cfg     Config
	sess    Session
	header  Header
	summary string
	conv    []route.Message
	chain   [][32]byte // chain[i]: digest of the system, summary and conv[:i]
	sent    int        // messages in the previous request, -1 before any
	// reported is the prompt tokens the last step call reported, at reportedAt messages.
	reported   int64
	reportedAt int
	turns      int64
	log        *slog.Logger
}

// New returns the agent of sess.
func New(sess Session, cfg Config) *Agent {
	if cfg.Fold.Client == nil {
		cfg.Fold = cfg.Step
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Agent{cfg: cfg, sess: sess, header: cfg.Header, sent: -1, log: cfg.Logger}
	a.rebase()
	return a
}

// Resume sets the agent's state to what a session's records hold: the latest fold's
// summary, the conversation since it, and the number of turns already run. The next
// request is not taken to extend any earlier one.
func (a *Agent) Resume(header Header, summary string, conv []route.Message, turns int64) {
	a.header, a.summary, a.conv, a.turns = header, summary, append([]route.Message(nil), conv...), turns
	a.sent, a.reported, a.reportedAt = -1, 0, 0
	a.rebase()
}

// Conversation is the conversation since the fold, as the next request carries it.
func (a *Agent) Conversation() []route.Message { return a.conv }

// Summary is the latest fold's summary, "" before any.
func (a *Agent) Summary() string { return a.summary }

// rebase restarts the digest chain on the current header and summary.
func (a *Agent) rebase() {
	h := sha256.New()
	writeField(h, a.header.Text)
	writeField(h, a.summary)
	var d [32]byte
	h.Sum(d[:0])
	a.chain = [][32]byte{d}
	for _, m := range a.conv {
		a.chainMessage(m)
	}
}

type hashWriter interface{ Write([]byte) (int, error) }

func writeField(h hashWriter, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

func (a *Agent) chainMessage(m route.Message) {
	h := sha256.New()
	prev := a.chain[len(a.chain)-1]
	h.Write(prev[:])
	writeField(h, m.Role)
	writeField(h, m.Text)
	writeField(h, m.CallID)
	if m.Call != nil {
		writeField(h, m.Call.ID)
		writeField(h, m.Call.Arguments)
	}
	var d [32]byte
	h.Sum(d[:0])
	a.chain = append(a.chain, d)
}

func (a *Agent) add(msgs ...route.Message) {
	for _, m := range msgs {
		a.conv = append(a.conv, m)
		a.chainMessage(m)
	}
}

// turn is one turn's state.
type turn struct {
	id      int64
	steps   int
	calls   int
	totals  Totals
	nudged  bool
	lastKey string
	repeats int
}

// Turn runs one turn on inputs and returns its end. Cancelling ctx cancels the turn: the
// model call is aborted or the cell interrupted, and the turn ends cancelled. An error
// is a record that could not be written; the turn's end is then unknown to the record.
func (a *Agent) Turn(ctx context.Context, inputs []Input) (TurnEnd, error) {
	a.turns++
	t := &turn{id: a.turns}
	start := &TurnStart{Turn: t.id, StartedAt: a.cfg.Now(), HeaderDigest: a.header.Digest}
	for _, in := range inputs {
		start.Trigger = append(start.Trigger, in.ID)
	}
	if err := a.sess.Record(ctx, start); err != nil {
		return TurnEnd{}, err
	}
	if err := a.maybeFold(ctx, t, inputs); err != nil {
		return TurnEnd{}, err
	}
	a.addInputs(inputs)
	tctx, cancel := ctx, context.CancelFunc(func() {})
	if a.cfg.TurnDeadline > 0 {
		tctx, cancel = context.WithTimeoutCause(ctx, a.cfg.TurnDeadline, errDeadline)
	}
	defer cancel()
	reason, detail := a.steps(tctx, t)
	if err := a.selectedFold(ctx, t); err != nil {
		return TurnEnd{}, err
	}
	end := TurnEnd{Turn: t.id, EndedAt: a.cfg.Now(), EndReason: reason, Detail: detail, Steps: t.steps, Totals: t.totals}
	a.progress(Progress{Turn: t.id, Step: t.steps, What: "end", End: reason, Error: detail})
	return end, a.sess.Record(context.WithoutCancel(ctx), &end)
}

var errDeadline = errors.New("agent: turn deadline")

// ended names why a turn's context ended.
func ended(ctx context.Context) (string, string) {
	if errors.Is(context.Cause(ctx), errDeadline) {
		return EndDeadline, "the turn ran past its deadline"
	}
	return EndCancelled, ""
}

func (a *Agent) addInputs(inputs []Input) {
	for _, in := range inputs {
		a.add(route.Message{Role: route.RoleUser, Text: transcript.RenderInput(transcript.Input{
			Source: in.Source, ReceivedAt: in.ReceivedAt, Payload: in.Payload})})
	}
}

func (a *Agent) progress(p Progress) {
	if a.cfg.OnStep != nil {
		a.cfg.OnStep(p)
	}
}

// MaxWindowTokens is the window of a route that names none (context_tokens 0): no
// model takes a larger request, and a conversation past it ends its turn (overflow)
// instead of growing without bound.
const MaxWindowTokens = 2_000_000

// window is the step route's context window in tokens.
func (a *Agent) window() int64 {
	if w := a.cfg.Step.ContextTokens; w > 0 {
		return w
	}
	return MaxWindowTokens
}

// maxRefusedArguments bounds the arguments of a refused call as the conversation keeps
// them, and sends them back on every step after.
const maxRefusedArguments = 4 << 10

// refusedArguments is what the conversation keeps of a refused call's arguments: them,
// or, past maxRefusedArguments, an object that says how long they were.
func refusedArguments(arguments string) string {
	if len(arguments) <= maxRefusedArguments {
		return arguments
	}
	return fmt.Sprintf(`{"omitted_bytes":%d}`, len(arguments))
}

// steps runs the turn's steps and returns its end reason.
func (a *Agent) steps(ctx context.Context, t *turn) (string, string) {
	for {
		if ctx.Err() != nil {
			return ended(ctx)
		}
		if reason, detail := a.capped(t); reason != "" {
			return reason, detail
		}
		steer, err := a.sess.Pending(ctx)
		if err != nil {
			return EndModelError, "reading pending inputs: " + err.Error()
		}
		a.addInputs(steer)
		if window := a.window(); a.estimate() > window {
			return EndOverflow, fmt.Sprintf("the next request is about %d tokens; the window is %d", a.estimate(), window)
		}
		t.steps++
		purpose := PurposeStep
		if n := len(a.conv); n > 0 && a.conv[n-1].Text == Nudge {
			purpose = PurposeNudge
		}
		reply, err := a.call(ctx, t, a.cfg.Step, purpose, route.Request{})
		if err != nil {
			if ctx.Err() != nil {
				return ended(ctx)
			}
			return EndModelError, err.Error()
		}
		if reply.Call == nil {
			a.add(route.Message{Role: route.RoleAssistant, Text: reply.Text})
			if t.nudged {
				return EndNoCode, ""
			}
			t.nudged = true
			a.add(route.Message{Role: route.RoleUser, Text: Nudge})
			continue
		}
		call := *reply.Call
		if call.ID == "" {
			call.ID = fmt.Sprintf("call_%d_%d", t.id, t.steps)
		}
		if call.Problem != "" {
			arguments := call.Arguments
			call.Arguments = refusedArguments(arguments)
			a.add(route.Message{Role: route.RoleAssistant, Text: reply.Text, Call: &call},
				route.Message{Role: route.RoleTool, CallID: call.ID, Text: transcript.RenderToolResult(
					transcript.ToolResult{At: a.cfg.Now(), Status: "error", Error: "no cell ran: " + call.Problem})})
			if a.stuck(t, arguments, call.Problem) {
				return EndStuck, call.Problem
			}
			continue
		}
		a.add(route.Message{Role: route.RoleAssistant, Text: reply.Text, Call: &call})
		a.progress(Progress{Turn: t.id, Step: t.steps, What: "cell"})
		cell, err := a.sess.Execute(ctx, call.Code)
		if err != nil {
			cell = Cell{Status: "failed", Error: "the cell did not run: " + err.Error(), Started: a.cfg.Now(), Ended: a.cfg.Now(), NotRun: true}
		}
		a.progress(Progress{Turn: t.id, Step: t.steps, What: "cell_done", Cell: cell.ID, Error: cell.Error})
		result := transcript.ToolResult{At: cell.Ended, Status: cell.Status, Output: cell.Output, Error: cell.Error}
		if !cell.NotRun {
			ran := cell.Ended.Sub(cell.Started)
			result.Ran = &ran
		}
		a.add(route.Message{Role: route.RoleTool, CallID: call.ID, Text: transcript.RenderToolResult(result)})
		for _, n := range cell.Notices {
			a.add(route.Message{Role: route.RoleUser, Text: n})
		}
		switch {
		case cell.Status == "yielded":
			return EndWaited, ""
		case ctx.Err() != nil:
			return ended(ctx)
		case cell.Error != "" && a.stuck(t, call.Code, sameError(cell)):
			return EndStuck, cell.Error
		case cell.Error == "":
			t.lastKey, t.repeats = "", 0
		}
	}
}

// stuck counts a failure of code with error and says whether it is the StuckRepeats-th
// in a row.
func (a *Agent) stuck(t *turn, code, errText string) bool {
	key := code + "\x00" + errText
	if key == t.lastKey {
		t.repeats++
	} else {
		t.lastKey, t.repeats = key, 1
	}
	return t.repeats >= StuckRepeats
}

// sameError is a cell's error as two failures of the same code compare: without the
// cell's own id, which a traceback names.
func sameError(c Cell) string {
	if c.ID == "" {
		return c.Error
	}
	return strings.ReplaceAll(c.Error, c.ID, "")
}

// capped names the cap the turn reached, if any.
func (a *Agent) capped(t *turn) (string, string) {
	switch {
	case a.cfg.MaxSteps > 0 && t.steps >= a.cfg.MaxSteps:
		return EndStepCap, fmt.Sprintf("%d steps", t.steps)
	case a.cfg.MaxTurnTokens > 0 && t.totals.Tokens() >= a.cfg.MaxTurnTokens:
		return EndTokenCap, fmt.Sprintf("%d tokens of %d", t.totals.Tokens(), a.cfg.MaxTurnTokens)
	case a.cfg.MaxTurnCostMicro > 0 && t.totals.CostMicros != nil && *t.totals.CostMicros >= a.cfg.MaxTurnCostMicro:
		return EndCostCap, fmt.Sprintf("%d µ$ of %d", *t.totals.CostMicros, a.cfg.MaxTurnCostMicro)
	}
	return "", ""
}

// estimate is the tokens the next request is about: the last reported prompt, plus the
// bytes appended since over BytesPerToken.
func (a *Agent) estimate() int64 {
	base, from := a.reported, a.reportedAt
	if base == 0 {
		base, from = int64(len(a.header.Text)+len(a.summary))/BytesPerToken, 0
	}
	if from > len(a.conv) {
		from = len(a.conv)
	}
	var bytes int
	for _, m := range a.conv[from:] {
		bytes += len(m.Text)
		if m.Call != nil {
			bytes += len(m.Call.Arguments)
		}
	}
	return base + int64(bytes/BytesPerToken)
}

// call makes one model call of the conversation (plus extra messages, not kept) and
// records it.
func (a *Agent) call(ctx context.Context, t *turn, r Route, purpose string, extra route.Request) (route.Reply, error) {
	req := route.Request{System: a.header.Text, Summary: a.summary, Messages: a.conv, CacheKey: a.sess.ID(), NoTools: extra.NoTools}
	n := len(a.conv)
	rec := &ModelCall{Turn: t.id, Purpose: purpose, Route: r.Name, Messages: n}
	rec.RequestDigest = hex.EncodeToString(a.chain[n][:])
	if len(extra.Messages) > 0 {
		req.Messages = append(append([]route.Message(nil), a.conv...), extra.Messages...)
		rec.Messages = len(req.Messages)
	}
	if a.sent >= 0 && a.sent <= n {
		rec.PrefixDigest, rec.Extends = hex.EncodeToString(a.chain[a.sent][:]), true
	} else {
		rec.PrefixDigest = hex.EncodeToString(a.chain[0][:])
	}
	t.calls++
	rec.Seq = t.calls
	a.progress(Progress{Turn: t.id, Step: t.steps, What: "model_call"})
	began := time.Now()
	reply, err := r.Client.Call(ctx, req)
	rec.LatencyMs = time.Since(began).Milliseconds()
	if err != nil {
		rec.Error = err.Error()
		var ce *route.CallError
		if errors.As(err, &ce) {
			rec.Failures = ce.Failures
		}
	} else {
		rec.Model, rec.StopReason, rec.Usage, rec.Failures = reply.Model, reply.StopReason, reply.Usage, reply.Failures
		rec.Text, rec.DroppedCalls = reply.Text, reply.DroppedCalls
		if reply.Call != nil {
			rec.Code = reply.Call.Code
		}
		rec.CostMicros = Cost(reply.Usage, r.Price)
		if purpose != PurposeFold {
			a.sent = n
			if d := reply.Usage; d != nil {
				if p := d.WithDerived().PromptTokens; p != nil {
					a.reported, a.reportedAt = p.Value, n
				}
			}
		}
	}
	t.totals.Add(rec.Usage, rec.CostMicros)
	a.progress(Progress{Turn: t.id, Step: t.steps, What: "model_reply", Error: rec.Error})
	if recErr := a.sess.Record(context.WithoutCancel(ctx), rec); recErr != nil {
		return route.Reply{}, errors.Join(err, recErr)
	}
	return reply, err
}

// maybeFold folds before a turn when the next request would come within the margin of
// the window; the turn's own inputs, keep, come after it. A failed fold is logged and
// leaves everything as it was.
func (a *Agent) maybeFold(ctx context.Context, t *turn, keep []Input) error {
	window := a.cfg.Step.ContextTokens
	if window <= 0 || len(a.conv) == 0 || a.estimate() <= window-a.cfg.FoldMarginTokens {
		return nil
	}
	_, err := a.fold(ctx, t, keep, false)
	return err
}

// selectedFold folds at the end of turn t when the session asked for a new frontier
// (see FrontierSession), and marks it installed once folded. A turn cancelled, or a
// fold that fails, leaves it asked for, to fold at the end of a later turn.
func (a *Agent) selectedFold(ctx context.Context, t *turn) error {
	fs, ok := a.sess.(FrontierSession)
	if !ok || ctx.Err() != nil || len(a.conv) == 0 {
		return nil
	}
	selected, err := fs.FrontierSelected(ctx)
	if err != nil {
		a.log.Warn("reading the frontier selection", "err", err)
		return nil
	}
	if !selected {
		return nil
	}
	folded, err := a.fold(ctx, t, nil, true)
	if err != nil || !folded {
		return err
	}
	return fs.FrontierInstalled(context.WithoutCancel(ctx), t.id)
}

// fold makes one fold call summarizing the conversation, moves the head, and records
// the fold; the inputs of keep come after it. A failed fold call is logged and leaves
// everything as it was (folded false); an error is a record not written.
func (a *Agent) fold(ctx context.Context, t *turn, keep []Input, selected bool) (folded bool, err error) {
	before := a.estimate()
	reply, err := a.call(ctx, t, a.cfg.Fold, PurposeFold, route.Request{NoTools: true,
		Messages: []route.Message{{Role: route.RoleUser, Text: FoldInstruction}}})
	if err != nil || reply.Text == "" {
		a.log.Warn("fold failed; the session goes on unfolded", "err", err)
		return false, nil
	}
	fold := &Fold{Turn: t.id, Covers: len(a.conv), Summary: reply.Text, HeaderBefore: a.header.Digest, TokensBefore: before,
		Selected: selected}
	head, reason, err := a.sess.MoveHead(ctx, keep)
	if err != nil {
		a.log.Warn("moving the head at a fold", "err", err)
		head = a.header
	} else {
		fold.HeadReason = reason
	}
	fold.HeaderAfter = head.Digest
	if err := a.sess.Record(context.WithoutCancel(ctx), fold); err != nil {
		return false, err
	}
	a.header, a.summary, a.conv = head, reply.Text, nil
	a.sent, a.reported, a.reportedAt = -1, 0, 0
	a.rebase()
	return true, nil
}
