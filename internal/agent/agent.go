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
	"github.com/kilnrt/kiln/internal/textcut"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wire"
)

// StuckRepeats is how many times the same code failing with the same error ends a turn.
const StuckRepeats = 3

// BytesPerToken estimates tokens from bytes where no route reported a count.
const BytesPerToken = 3

// Nudge is the user message after a text-only answer, once a turn, on a route with the
// python tool.
const Nudge = "[kiln] Your reply had no code, so nothing ran and nothing was said to the operator. " +
	"Act by calling the python tool; speak with await runtime.request(\"local.send\", text=...); " +
	"end the turn with await runtime.wait(seconds or None)."

// NudgeText is Nudge on a route without tools, where code comes as a fenced block.
const NudgeText = "[kiln] Your reply had no python block, so nothing ran and nothing was said to the operator. " +
	"Act by writing one block opened by ```python on its own line and closed by ``` on its own line; " +
	"speak with await runtime.request(\"local.send\", text=...); end the turn with await runtime.wait(seconds or None)."

// FoldInstruction asks a fold call for its summary.
const FoldInstruction = "[kiln] Summarize the conversation so far for your own later use, replacing it. " +
	"Answer with text only: call no tool and write no code block. " +
	"Use exactly these sections: Goal, Progress, Decisions, Next steps, Files. Keep facts, names, paths and open questions; drop chatter."

// Continued is the message a conversation folded in the middle of a turn goes on from.
const Continued = "[kiln] The conversation was folded into the summary above in the middle of a turn. " +
	"Carry on with the task from its Next steps."

// MaxCellOutputTokens is the most tokens one cell's result adds: the spec's bound on a
// cell's output (wire.MaxOutputBytes) over BytesPerToken, rounded up.
const MaxCellOutputTokens = (wire.MaxOutputBytes + BytesPerToken - 1) / BytesPerToken

// MaxFoldBackoffTurns bounds how many turns pass, after folds that failed in a row,
// before the next fold is tried: 1, 2, 4… turns, at most this many.
const MaxFoldBackoffTurns = 64

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
	// Images are the images the cell displayed, in order (PNG and JPEG).
	Images []route.Image
}

// Bounds of the images one step shows the model: a cell's images past either are left
// out, and its result says so.
const (
	MaxStepImages     = 4
	MaxStepImageBytes = 4 << 20
	// ImageTokens is what one image is estimated to cost in a request, in tokens: about
	// what a megapixel image costs on the routes that take images.
	ImageTokens = 1600
)

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

// HeaderObserver is a Session that can look at its instruction sources at the start of
// a turn, before the first model call: it records a change it finds and returns the
// observations to render, in order.
type HeaderObserver interface {
	ObserveHeader(ctx context.Context) ([]string, error)
}

// Route is a configured route as the agent uses it.
type Route struct {
	Name          string
	Client        route.Client
	ContextTokens int64 // 0: no window known; MaxWindowTokens bounds it
	Price         Price
}

// Config configures an Agent.
type Config struct {
	Step Route
	Fold Route // zero: the step route
	// Header is the pinned instruction text the session's transcript runs under.
	Header           Header
	MaxSteps         int   // 0: no cap
	MaxTurnTokens    int64 // 0: no cap
	MaxTurnCostMicro int64 // 0: no cap
	// MaxSessionCostMicro bounds what the session's calls cost over its life; 0: no cap.
	MaxSessionCostMicro int64
	// Charged, when set, is what the calls of other sessions charged to this one cost so
	// far (micro-dollars) — its peers', which count toward MaxSessionCostMicro.
	Charged func() int64
	// MaxDayCostMicro bounds what the calls charged to Ledger cost in a UTC day; 0: no cap.
	MaxDayCostMicro int64
	// Ledger keeps the day's spending; nil is one of the agent's own. Agents given one
	// ledger share the day cap.
	Ledger       *Ledger
	TurnDeadline time.Duration // 0: none
	// FoldMarginTokens is kept free below the window; it is raised to at least one
	// model reply and one cell's whole output (see Agent.Margin).
	FoldMarginTokens int64
	Logger           *slog.Logger
	Now              func() time.Time
	// OnStep is told each step's progress: a model call begun and ended, a cell begun
	// and ended. It must not block.
	OnStep func(Progress)
	// OnDelta, when set, is told the pieces of each model call's reply as its route
	// streams them. It must not block.
	OnDelta func(Delta)
}

// Delta is a piece of a model call's reply as it streams (see route.Request.OnDelta).
type Delta struct {
	Turn    int64
	Step    int
	Call    int // the call's seq in its turn, as its ModelCall record says
	Purpose string
	Kind    string // route.DeltaText, DeltaArguments, DeltaRestart
	Text    string
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
	step       route.Info // what the step route says of itself
	// spent is the micro-dollars charged to the session's calls, all turns.
	spent int64
	// foldFailures counts the folds that failed in a row; none is tried before turn
	// foldAt.
	foldFailures int
	foldAt       int64
	// notes are told the model at the next turn's start: turns of its that died.
	notes []string
	// lastCalls counts the model calls of the last turn, which an operator's fold
	// between turns numbers its call after.
	lastCalls int
	// operatorFold marks the fold under way as the operator's (FoldNow).
	operatorFold bool
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
	if cfg.Ledger == nil {
		cfg.Ledger = new(Ledger)
	}
	a := &Agent{cfg: cfg, sess: sess, header: cfg.Header, sent: -1, log: cfg.Logger, step: route.Describe(cfg.Step.Client)}
	a.rebase()
	a.warnUnmeasured()
	return a
}

// warnUnmeasured warns of a cost cap a route cannot measure: one without the prices
// that bound a call's cost. Such a cap fails closed: it ends a turn at its first call.
func (a *Agent) warnUnmeasured() {
	if a.cfg.MaxTurnCostMicro <= 0 && a.cfg.MaxSessionCostMicro <= 0 && a.cfg.MaxDayCostMicro <= 0 {
		return
	}
	for _, r := range []Route{a.cfg.Step, a.cfg.Fold} {
		if _, ok := r.Price.highestInput(); !ok || r.Price.Output == nil {
			a.log.Warn("a cost cap the route cannot measure: it has no input or no output price, "+
				"so each of its calls ends the turn cost_cap", "route", r.Name)
		}
	}
}

// Margin is the fold margin: the configured one, raised to at least one model reply at
// the route's output bound and one cell's whole output, the most one step can add.
// On a window under twice that, it is half the window.
func (a *Agent) Margin() int64 {
	return min(max(a.cfg.FoldMarginTokens, a.step.MaxOutputTokens+MaxCellOutputTokens), a.window()/2)
}

// replyRoom is the room a request leaves for its reply: the route's output bound, at
// most a quarter of the window.
func (a *Agent) replyRoom() int64 { return min(a.step.MaxOutputTokens, a.window()/4) }

// Spent sets what the session's calls were charged before (micro-dollars), and what the
// calls charged to the ledger today were, as the record holds them after a restart.
func (a *Agent) Spent(session, today int64) {
	a.spent = session
	a.cfg.Ledger.seed(a.cfg.Now(), a.sess.ID(), today)
}

// Died tells the model, at the start of the next turn, that turns of its ended with the
// host (host_died).
func (a *Agent) Died(turns []int64) {
	for _, id := range turns {
		a.notes = append(a.notes, fmt.Sprintf("[kiln] turn %d ended host_died: the host stopped while it ran. "+
			"What it did before that is above; anything after its last result may be half done.", id))
	}
}

// Resume sets the agent's state to what a session's records hold: the latest fold's
// summary, the conversation since it, the number of turns already run, and the model
// calls of the last (an operator's fold between turns numbers its call after them). The
// next request is not taken to extend any earlier one.
func (a *Agent) Resume(header Header, summary string, conv []route.Message, turns int64, lastCalls int) {
	a.header, a.summary, a.conv, a.turns = header, summary, append([]route.Message(nil), conv...), turns
	a.lastCalls = lastCalls
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
	for _, img := range m.Images {
		writeField(h, img.MIMEType)
		writeField(h, string(img.Data))
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
	// refitted says the turn folded once on the model's refusal of a request as too long.
	refitted bool
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
	tctx, cancel := ctx, context.CancelFunc(func() {})
	if a.cfg.TurnDeadline > 0 {
		tctx, cancel = context.WithTimeoutCause(ctx, a.cfg.TurnDeadline, errDeadline)
	}
	defer cancel()
	reason, detail := a.begin(tctx, t, inputs)
	if reason == "" {
		reason, detail = a.steps(tctx, t)
	}
	if err := a.selectedFold(ctx, t); err != nil {
		reason, detail = EndModelError, err.Error()
	}
	a.lastCalls = t.calls
	end := TurnEnd{Turn: t.id, EndedAt: a.cfg.Now(), EndReason: reason, Detail: route.Valid(detail), Steps: t.steps, Totals: t.totals}
	a.progress(Progress{Turn: t.id, Step: t.steps, What: "end", End: reason, Error: end.Detail})
	err := a.sess.Record(context.WithoutCancel(ctx), &end)
	if err != nil {
		// The end must be on the record: once more, saying why the first did not go.
		end.Detail = route.Valid(fmt.Sprintf("%s (the first record of this end failed: %v)", end.Detail, err))
		err = a.sess.Record(context.WithoutCancel(ctx), &end)
	}
	return end, err
}

// begin opens a turn: a fold when one is due, the notes of died turns, the inputs, and
// the observations of a changed header, all before the first model call. A reason is
// returned when the turn ends before its first step.
func (a *Agent) begin(ctx context.Context, t *turn, inputs []Input) (string, string) {
	if a.conv != nil && a.estimate() > a.window()-a.Margin() && a.foldDue() {
		if _, err := a.fold(ctx, t, inputs, false); err != nil {
			if errors.Is(err, errRecord) {
				return EndModelError, err.Error()
			}
			a.log.Warn("a fold failed; the session goes on unfolded", "turn", t.id, "err", err)
		}
	}
	for _, n := range a.notes {
		a.add(route.Message{Role: route.RoleUser, Text: n})
	}
	a.notes = nil
	a.addInputs(inputs)
	if o, ok := a.sess.(HeaderObserver); ok {
		notices, err := o.ObserveHeader(ctx)
		if err != nil {
			a.log.Warn("observing the instruction text at a turn's start", "turn", t.id, "err", err)
		}
		for _, n := range notices {
			a.add(route.Message{Role: route.RoleUser, Text: n})
		}
	}
	return "", ""
}

// errRecord is a record that could not be written: the turn ends model_error.
var errRecord = errors.New("agent: a record could not be written")

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

// refusedText is what the conversation keeps of the text of a reply whose call was
// refused: the text, or, past maxRefusedArguments, its start and a note of its length
// (on a route without tools the refused block is in the text).
func refusedText(text string) string {
	if len(text) <= maxRefusedArguments {
		return text
	}
	head, _ := textcut.Prefix(text, maxRefusedArguments/4)
	if i := strings.Index(head, "```python"); i >= 0 {
		head = head[:i]
	}
	return fmt.Sprintf("%s\n[kiln] %d more bytes of this reply are not kept here.", head, len(text)-len(head))
}

// nudge is the nudge of the step route.
func (a *Agent) nudge() string {
	if a.step.Tools {
		return Nudge
	}
	return NudgeText
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
		if reason, detail := a.fit(ctx, t, false); reason != "" {
			return reason, detail
		}
		t.steps++
		purpose := PurposeStep
		if n := len(a.conv); n > 0 && a.conv[n-1].Text == a.nudge() {
			purpose = PurposeNudge
		}
		reply, err := a.call(ctx, t, a.cfg.Step, callSpec{purpose: purpose})
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return ended(ctx)
			case errors.Is(err, route.ErrContextLength) && !t.refitted:
				// The model says the request is over its window: fold once and retry.
				t.refitted = true
				a.reported, a.reportedAt = a.window()+1, len(a.conv)
				if reason, detail := a.fit(ctx, t, true); reason != "" {
					return reason, detail
				}
				continue
			}
			return EndModelError, err.Error()
		}
		if reply.Call == nil {
			a.add(route.Message{Role: route.RoleAssistant, Text: reply.Text})
			if t.nudged {
				return EndNoCode, ""
			}
			t.nudged = true
			a.add(route.Message{Role: route.RoleUser, Text: a.nudge()})
			continue
		}
		call := *reply.Call
		if call.ID == "" {
			call.ID = fmt.Sprintf("call_%d_%d", t.id, t.steps)
		}
		if call.Problem != "" {
			arguments := call.Arguments
			call.Arguments = refusedArguments(arguments)
			a.add(route.Message{Role: route.RoleAssistant, Text: refusedText(reply.Text), Call: &call},
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
		images, note := a.shown(cell.Images)
		a.add(route.Message{Role: route.RoleTool, CallID: call.ID, Text: transcript.RenderToolResult(result) + note, Images: images})
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

// shown are the images of a cell the step's route shows the model, at most
// MaxStepImages of at most MaxStepImageBytes together, and a note for the result
// saying what was left out and why ("" when nothing was).
func (a *Agent) shown(images []route.Image) ([]route.Image, string) {
	if len(images) == 0 {
		return nil, ""
	}
	if !a.step.Images {
		return nil, fmt.Sprintf("\n[kiln] The cell displayed %d image(s); this route does not show images to the model.", len(images))
	}
	var out []route.Image
	size := 0
	for _, img := range images {
		if len(out) == MaxStepImages || size+len(img.Data) > MaxStepImageBytes {
			break
		}
		out = append(out, img)
		size += len(img.Data)
	}
	if left := len(images) - len(out); left > 0 {
		return out, fmt.Sprintf("\n[kiln] %d of the cell's %d images are not shown: a step shows at most %d, of %d bytes together.",
			left, len(images), MaxStepImages, MaxStepImageBytes)
	}
	return out, ""
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

// capped names the cap the turn reached, if any. Caps count what calls were charged:
// their tokens and cost where the route reported them, an upper bound where it did not;
// a cost that cannot be bounded (a price absent) reaches every cost cap.
func (a *Agent) capped(t *turn) (string, string) {
	tt := t.totals
	costCap := func(name string, spent, limit int64) (string, string) {
		switch {
		case limit <= 0:
			return "", ""
		case tt.Unpriced > 0:
			return EndCostCap, fmt.Sprintf("%s: %d call(s) could not be priced (a price of the route is absent)", name, tt.Unpriced)
		case spent >= limit:
			return EndCostCap, fmt.Sprintf("%s: %d µ$ charged of %d%s", name, spent, limit, bounded(tt))
		}
		return "", ""
	}
	if a.cfg.MaxSteps > 0 && t.steps >= a.cfg.MaxSteps {
		return EndStepCap, fmt.Sprintf("%d steps", t.steps)
	}
	if a.cfg.MaxTurnTokens > 0 && tt.ChargedTokens >= a.cfg.MaxTurnTokens {
		return EndTokenCap, fmt.Sprintf("%d tokens charged of %d%s", tt.ChargedTokens, a.cfg.MaxTurnTokens, bounded(tt))
	}
	if r, d := costCap("turn", tt.ChargedMicros, a.cfg.MaxTurnCostMicro); r != "" {
		return r, d
	}
	spent := a.spent
	if a.cfg.Charged != nil && a.cfg.MaxSessionCostMicro > 0 {
		spent += a.cfg.Charged()
	}
	if r, d := costCap("session", spent, a.cfg.MaxSessionCostMicro); r != "" {
		return r, d
	}
	return costCap("day", a.cfg.Ledger.Spent(a.cfg.Now()), a.cfg.MaxDayCostMicro)
}

// bounded says how many of the calls summed were charged an upper bound.
func bounded(t Totals) string {
	if t.Bounded == 0 {
		return ""
	}
	return fmt.Sprintf("; %d call(s) charged an upper bound, their route not reporting all it used", t.Bounded)
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
	return base + messageBytes(a.conv[from:])/BytesPerToken
}

// messageBytes is the bytes of msgs' texts and arguments, an image counted as the bytes
// of ImageTokens.
func messageBytes(msgs []route.Message) int64 {
	var n int
	for _, m := range msgs {
		n += len(m.Text) + len(m.Images)*ImageTokens*BytesPerToken
		if m.Call != nil {
			n += len(m.Call.Arguments)
		}
	}
	return int64(n)
}

// fit makes the next request fit the window at a step boundary. Past the fold margin it
// folds (when a fold is due, or at once when force: the model refused the request as too
// long) and the turn goes on from the summary; a request that would not leave room for a
// reply even then ends the turn overflow.
func (a *Agent) fit(ctx context.Context, t *turn, force bool) (string, string) {
	window := a.window()
	if est := a.estimate(); (force || est > window-a.Margin()) && len(a.conv) > 1 && (force || a.foldDue()) {
		_, err := a.fold(ctx, t, nil, false)
		switch {
		case errors.Is(err, errRecord):
			return EndModelError, err.Error()
		case err != nil && ctx.Err() != nil:
			return ended(ctx)
		case err != nil:
			a.log.Warn("a fold in the middle of a turn failed", "turn", t.id, "err", err)
			if force {
				return EndOverflow, fmt.Sprintf("the model refused the request as over its window, and the fold failed: %v", err)
			}
		default:
			a.add(route.Message{Role: route.RoleUser, Text: Continued})
		}
	}
	if est := a.estimate(); est > window-a.replyRoom() {
		return EndOverflow, fmt.Sprintf("the next request is about %d tokens; with a reply of up to %d it is over the window of %d",
			est, a.replyRoom(), window)
	}
	return "", ""
}

// callSpec is what one model call sends beyond the conversation.
type callSpec struct {
	purpose  string
	textOnly bool
	// from is the first message of the conversation sent: above 0 when a fold's request
	// leaves the oldest out to fit the window.
	from int
	// lead are sent before the conversation (from on), extra after; neither is kept.
	lead, extra []route.Message
}

// call makes one model call of the conversation (from cs.from, plus cs.extra) and
// records it, with what it was charged.
func (a *Agent) call(ctx context.Context, t *turn, r Route, cs callSpec) (route.Reply, error) {
	n := len(a.conv)
	msgs := a.conv[cs.from:]
	if len(cs.lead) > 0 {
		msgs = append(append([]route.Message(nil), cs.lead...), msgs...)
	}
	if len(cs.extra) > 0 {
		msgs = append(msgs[:len(msgs):len(msgs)], cs.extra...)
	}
	req := route.Request{System: a.header.Text, Summary: a.summary, Messages: msgs, CacheKey: a.sess.ID(), TextOnly: cs.textOnly}
	rec := &ModelCall{Turn: t.id, Purpose: cs.purpose, Route: r.Name, Messages: len(msgs)}
	if route.Describe(r.Client).Images {
		for _, m := range msgs {
			rec.Images += len(m.Images)
		}
	}
	switch {
	case cs.from > 0:
		rec.RequestDigest = hex.EncodeToString(a.chainOf(msgs[:len(msgs)-len(cs.extra)]))
		rec.PrefixDigest = hex.EncodeToString(a.chain[0][:])
	case a.sent >= 0 && a.sent <= n:
		rec.RequestDigest = hex.EncodeToString(a.chain[n][:])
		rec.PrefixDigest, rec.Extends = hex.EncodeToString(a.chain[a.sent][:]), true
	default:
		rec.RequestDigest = hex.EncodeToString(a.chain[n][:])
		rec.PrefixDigest = hex.EncodeToString(a.chain[0][:])
	}
	promptBound := a.estimateFrom(cs.from) + (messageBytes(cs.lead)+messageBytes(cs.extra))/BytesPerToken
	t.calls++
	rec.Seq = t.calls
	if on := a.cfg.OnDelta; on != nil {
		d := Delta{Turn: t.id, Step: t.steps, Call: t.calls, Purpose: cs.purpose}
		req.OnDelta = func(kind, text string) {
			d.Kind, d.Text = kind, text
			on(d)
		}
	}
	a.progress(Progress{Turn: t.id, Step: t.steps, What: "model_call"})
	began := time.Now()
	reply, err := r.Client.Call(ctx, req)
	rec.LatencyMs = time.Since(began).Milliseconds()
	if err != nil {
		rec.Error = route.Valid(err.Error())
		var ce *route.CallError
		if errors.As(err, &ce) {
			rec.Failures = ce.Failures
		}
	} else {
		rec.Model, rec.StopReason, rec.Usage, rec.Failures = reply.Model, reply.StopReason, reply.Usage, reply.Failures
		rec.Text, rec.DroppedCalls, rec.UsageProblem = reply.Text, reply.DroppedCalls, reply.UsageProblem
		if reply.Call != nil {
			rec.Code = reply.Call.Code
		}
		rec.CostMicros = Cost(reply.Usage, r.Price)
		ch := charge(reply.Usage, rec.CostMicros, r.Price, promptBound, route.Describe(r.Client).MaxOutputTokens)
		rec.Charged = &ch
		a.spent += ch.Micros
		a.cfg.Ledger.Add(a.cfg.Now(), ch.Micros)
		if cs.purpose != PurposeFold {
			a.sent = n
			if d := reply.Usage; d != nil {
				if p := d.WithDerived().PromptTokens; p != nil {
					a.reported, a.reportedAt = p.Value, n
				}
			}
		}
	}
	t.totals.Add(rec.Usage, rec.CostMicros)
	t.totals.AddCharge(rec.Charged)
	a.progress(Progress{Turn: t.id, Step: t.steps, What: "model_reply", Error: rec.Error})
	if recErr := a.sess.Record(context.WithoutCancel(ctx), rec); recErr != nil {
		return route.Reply{}, fmt.Errorf("%w: the model call: %w", errRecord, errors.Join(err, recErr))
	}
	return reply, err
}

// chainOf is the digest of the header, the summary and msgs, chained as a.chain is.
func (a *Agent) chainOf(msgs []route.Message) []byte {
	save := a.chain
	a.chain = a.chain[:1:1]
	for _, m := range msgs {
		a.chainMessage(m)
	}
	d := a.chain[len(a.chain)-1]
	a.chain = save
	return d[:]
}

// estimateFrom is estimate for a request of the conversation from message from on: the
// estimate scaled by the share of the conversation's bytes it keeps.
func (a *Agent) estimateFrom(from int) int64 {
	all := messageBytes(a.conv)
	if all == 0 || from == 0 {
		return a.estimate()
	}
	head := int64(len(a.header.Text)+len(a.summary)) / BytesPerToken
	rest := a.estimate() - head
	return head + rest*messageBytes(a.conv[from:])/all
}

// foldDue says whether a fold may be tried: none failed, or the backoff after the last
// that failed has passed.
func (a *Agent) foldDue() bool { return a.turns >= a.foldAt }

// foldFrom is the first message a fold's request sends: 0, or, when the conversation
// does not fit the window at all, past the oldest messages until the rest fits three
// quarters of it, at a message that is not a tool result (which must follow its call).
func (a *Agent) foldFrom() int {
	if a.estimate() < a.window() {
		return 0
	}
	target := a.window() - a.window()/4
	for from := 1; from < len(a.conv); from++ {
		if a.conv[from].Role != route.RoleTool && a.estimateFrom(from) <= target {
			return from
		}
	}
	return len(a.conv)
}

// selectedFold folds at the end of turn t when the session asked for a new frontier
// (see FrontierSession), and marks it installed once folded. A turn cancelled, or a
// fold that fails, leaves it asked for, to fold at the end of a later turn (after the
// failed fold's backoff). An error is a record not written.
func (a *Agent) selectedFold(ctx context.Context, t *turn) error {
	fs, ok := a.sess.(FrontierSession)
	if !ok || ctx.Err() != nil || len(a.conv) == 0 || !a.foldDue() {
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
	if _, err := a.fold(ctx, t, nil, true); err != nil {
		if errors.Is(err, errRecord) {
			return err
		}
		a.log.Warn("the fold the session asked for failed", "turn", t.id, "err", err)
		return nil
	}
	return fs.FrontierInstalled(context.WithoutCancel(ctx), t.id)
}

// fold replaces the conversation by a summary of it, made by one model call (purpose
// fold): at a turn's start, where keep are the turn's inputs, which come after it; or in
// the middle of a turn, with keep empty. The fold's request is the step's request plus
// the fold instruction, tools and all, so that it shares the steps' cached prefix. A
// summary over a quarter of the window fails the fold. A failed fold is recorded and
// leaves the session as it was; the next is tried after 1, 2, 4… turns (at most
// MaxFoldBackoffTurns). It returns the fold's record, also of a fold that failed; an
// error wrapping errRecord is a record that could not be written.
func (a *Agent) fold(ctx context.Context, t *turn, keep []Input, selected bool) (*Fold, error) {
	before := a.estimate()
	from := a.foldFrom()
	var lead []route.Message
	if from > 0 {
		lead = []route.Message{{Role: route.RoleUser, Text: fmt.Sprintf(
			"[kiln] The %d oldest messages since the last summary are left out of this request, to fit the window.", from)}}
	}
	reply, err := a.call(ctx, t, a.cfg.Fold, callSpec{purpose: PurposeFold, textOnly: true, from: from, lead: lead,
		extra: []route.Message{{Role: route.RoleUser, Text: FoldInstruction}}})
	if errors.Is(err, errRecord) {
		return nil, err
	}
	summary := strings.TrimSpace(reply.Text)
	if err == nil {
		switch tokens := int64(len(summary)) / BytesPerToken; {
		case summary == "":
			err = errors.New("agent: the fold's reply has no text")
		case tokens > a.window()/4:
			err = fmt.Errorf("agent: the summary is about %d tokens, over a quarter of the window of %d", tokens, a.window())
		}
	}
	rec := &Fold{Turn: t.id, Covers: len(a.conv), LeftOut: from, HeaderBefore: a.header.Digest, TokensBefore: before,
		Selected: selected, Operator: a.operatorFold}
	if err != nil {
		a.foldFailures++
		a.foldAt = a.turns + min(int64(1)<<min(a.foldFailures-1, 30), MaxFoldBackoffTurns)
		rec.Error, rec.RetryTurn, rec.HeaderAfter = route.Valid(err.Error()), a.foldAt, a.header.Digest
		if recErr := a.sess.Record(context.WithoutCancel(ctx), rec); recErr != nil {
			return nil, fmt.Errorf("%w: a fold that failed: %w", errRecord, recErr)
		}
		return rec, err
	}
	a.foldFailures, a.foldAt = 0, 0
	rec.Summary = summary
	head, reason, err := a.sess.MoveHead(ctx, keep)
	if err != nil {
		a.log.Warn("moving the head at a fold", "err", err)
		head = a.header
	} else {
		rec.HeadReason = reason
	}
	rec.HeaderAfter = head.Digest
	if err := a.sess.Record(context.WithoutCancel(ctx), rec); err != nil {
		return nil, fmt.Errorf("%w: the fold: %w", errRecord, err)
	}
	a.header, a.summary, a.conv = head, summary, nil
	a.sent, a.reported, a.reportedAt = -1, 0, 0
	a.rebase()
	return rec, nil
}
