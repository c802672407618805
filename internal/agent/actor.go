package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
)

// SourceTimer is the source of the input a wait's deadline puts in the inbox.
const SourceTimer = "timer"

// MaxTurnInputs bounds the inputs one turn starts on; the rest start the next.
const MaxTurnInputs = 64

// Inbox is a session's durable inbox as its actor reads it: the inputs the store holds
// after the last one handed to the agent, each with its attention.plan decision.
type Inbox struct {
	Store   *store.Store
	Session int64 // the store's id of the session
	// Changed returns a channel closed at the record's next commit.
	Changed func() <-chan struct{}
}

// attention is the part of an attention decision the inbox acts on.
type attention struct {
	Action  string   `json:"action"`
	Seconds *float64 `json:"seconds"`
}

// take hands over the inputs due at now, in order: those to wake on (an input no policy
// plans, such as a timer's, wakes), and deferred ones whose deferral passed; an ignored
// input is handed over without waking. It stops at a deferred input not yet due and
// returns when it is due (zero when none is waiting).
func (in Inbox) take(ctx context.Context, now time.Time) ([]Input, time.Time, error) {
	events, err := in.Store.Undelivered(ctx, in.Session, MaxTurnInputs)
	if err != nil {
		return nil, time.Time{}, err
	}
	var wake []Input
	var last int64
	var next time.Time
	for _, ev := range events {
		var a attention
		if ev.Attention != nil {
			if err := json.Unmarshal(ev.Attention, &a); err != nil {
				return nil, time.Time{}, fmt.Errorf("agent: the attention of event %d: %w", ev.ID, err)
			}
		}
		if a.Action == "defer" && a.Seconds != nil {
			due := ev.ReceivedAt.Add(time.Duration(*a.Seconds * float64(time.Second)))
			if due.After(now) {
				next = due
				break
			}
		}
		last = ev.ID
		if a.Action != "ignore" {
			wake = append(wake, Input{ID: ev.ID, Source: ev.Source, ReceivedAt: ev.ReceivedAt, Payload: ev.Payload})
		}
	}
	if last > 0 {
		if err := in.Store.Deliver(ctx, in.Session, last); err != nil {
			return nil, time.Time{}, err
		}
	}
	return wake, next, nil
}

// Pending takes the inputs due now, to steer a running turn.
func (in Inbox) Pending(ctx context.Context) ([]Input, error) {
	inputs, _, err := in.take(ctx, in.Store.Now())
	return inputs, err
}

// Actor is a session's one actor: it waits for inputs and timers and runs the agent's
// turns on them, one at a time.
type Actor struct {
	agent   *Agent
	inbox   Inbox
	journal Journal
	log     *slog.Logger

	recovered bool // Recover has run

	mu      sync.Mutex
	cancel  context.CancelFunc // the running turn's; nil while idle
	waiting bool               // the agent waits (runtime.wait), with or without a deadline

	between chan func(context.Context) // run by Run while no turn runs
}

// NewActor returns the actor running a's turns on inbox's inputs, recording to journal.
func NewActor(a *Agent, inbox Inbox, journal Journal, log *slog.Logger) *Actor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Actor{agent: a, inbox: inbox, journal: journal, log: log, between: make(chan func(context.Context))}
}

// Between runs fn on the actor's goroutine while no turn runs, once the turns of the
// inputs waiting have run, and returns once it has; fn is given Run's context. ctx
// ending first returns its error, and fn then does not run.
func (ac *Actor) Between(ctx context.Context, fn func(context.Context)) error {
	done := make(chan struct{})
	select {
	case ac.between <- func(rctx context.Context) { defer close(done); fn(rctx) }:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-done
	return nil
}

// Cancel cancels the running turn and says whether one was running.
func (ac *Actor) Cancel() bool {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if ac.cancel == nil {
		return false
	}
	ac.cancel()
	return true
}

// Waiting says whether the agent waits in runtime.wait, with or without a deadline: it
// is not idle then, since an input or its timer will wake it.
func (ac *Actor) Waiting() bool {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	return ac.waiting
}

// Running says whether a turn is running.
func (ac *Actor) Running() bool {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	return ac.cancel != nil
}

// Recover ends the turns a dead host left open (host_died) and numbers the next turn
// after the recorded ones. Run does it first unless it was done; call it before Run to
// know it is done.
func (ac *Actor) Recover(ctx context.Context) error {
	turns, died, err := ac.journal.Recover(ctx, ac.inbox.Store.Now())
	if err != nil {
		return err
	}
	if len(died) > 0 {
		ac.log.Info("turns ended host_died", "turns", died)
		ac.agent.Died(died)
	}
	ac.agent.turns = max(ac.agent.turns, turns)
	session, today, err := ac.journal.Spent(ctx, ac.inbox.Store.Now())
	if err != nil {
		return err
	}
	ac.agent.Spent(session, today)
	ac.recovered = true
	return nil
}

// Run runs turns until ctx ends, after Recover. A wait's deadline puts a timer input in
// the inbox, which wakes the agent; so does any input that arrives first.
func (ac *Actor) Run(ctx context.Context) error {
	if !ac.recovered {
		if err := ac.Recover(ctx); err != nil {
			return err
		}
	}
	for {
		changed := ac.inbox.Changed()
		now := ac.inbox.Store.Now()
		inputs, next, err := ac.inbox.take(ctx, now)
		if err != nil {
			return err
		}
		if len(inputs) > 0 {
			ac.setWaiting(false)
			if err := ac.turn(ctx, inputs); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				// A record not written ends that turn; the actor lives on for the next.
				ac.log.Error("a turn's record could not be written", "err", err)
			}
			continue
		}
		w, waiting, err := ac.inbox.Store.OpenWait(ctx, ac.inbox.Session)
		if err != nil {
			return err
		}
		ac.setWaiting(waiting)
		if waiting && w.Deadline != nil {
			if !w.Deadline.After(now) {
				if err := ac.fire(ctx, w); err != nil {
					return err
				}
				continue
			}
			if next.IsZero() || w.Deadline.Before(next) {
				next = *w.Deadline
			}
		}
		if done := ac.idle(ctx, changed, now, next); done {
			return nil
		}
	}
}

func (ac *Actor) setWaiting(w bool) {
	ac.mu.Lock()
	ac.waiting = w
	ac.mu.Unlock()
}

// idle waits for ctx to end (true), for changed, or until next (when not zero); what
// Between asks runs meanwhile.
func (ac *Actor) idle(ctx context.Context, changed <-chan struct{}, now, next time.Time) bool {
	var timer <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(next.Sub(now))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return true
	case <-changed:
	case <-timer:
	case fn := <-ac.between:
		fn(ctx)
	}
	return false
}

// fire puts a wait's timer input in the inbox; recording it ends the wait.
func (ac *Actor) fire(ctx context.Context, w store.Wait) error {
	text := "the wait ended"
	if w.Seconds != nil {
		text = fmt.Sprintf("the wait of %gs ended", *w.Seconds)
	}
	_, err := ac.inbox.Store.AppendEvent(ctx, ac.inbox.Session, SourceTimer,
		map[string]string{"text": text, "wait": host.WaitRef(w.ID)})
	return err
}

func (ac *Actor) turn(ctx context.Context, inputs []Input) error {
	tctx, cancel := context.WithCancel(ctx)
	ac.mu.Lock()
	ac.cancel = cancel
	ac.mu.Unlock()
	defer func() {
		ac.mu.Lock()
		ac.cancel = nil
		ac.mu.Unlock()
		cancel()
	}()
	_, err := ac.agent.Turn(tctx, inputs)
	return err
}
