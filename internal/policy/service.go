package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// The host methods this package serves.
const (
	SendMethod     = "local.send"
	ListMethod     = "hooks.list"
	DescribeMethod = "hooks.describe"
	ActivateMethod = "behavior.activate"
)

// Error codes of the services.
const (
	CodeStaleEpoch     = "stale_epoch"     // behavior.activate's expected_epoch is not the database's
	CodeInvalidRelease = "invalid_release" // the candidate is not a stored release that loads
	CodeUnknownSlot    = "unknown_slot"    // hooks.describe of a slot there is not
	// CodeSendUnresolved is a local.send whose request identity started an effect whose
	// outcome was never recorded.
	CodeSendUnresolved = "send_unresolved"
)

// Receipt is what local.send answers: confirmed means a durable operator-lane event
// exists; held is not approval.
type Receipt struct {
	EffectID int64   `json:"effect_id"`
	Status   string  `json:"status"` // confirmed or held
	EventID  *int64  `json:"event_id"`
	Reason   *string `json:"reason"`
}

// Handlers are the policy's entrypoints by slot, from its release's manifest, read and
// checked as a load reads them.
func (p *Policy) Handlers() (map[string]string, error) {
	snap, err := p.snapshot()
	if err != nil {
		return nil, err
	}
	m, err := release.ReadManifest(snap)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRelease, err)
	}
	return m.Hooks, nil
}

// Speech is told each confirmed local.send, once it is recorded: the text the agent
// said and its receipt; nil ignores them.
type Speech func(text string, r Receipt)

// sendKey is a local.send request's identity: its session, execution and request id.
type sendKey struct {
	session            int64
	execution, request string
}

// flight is a local.send being reviewed and recorded; done is closed once it has landed:
// its receipt recorded, its failure answered, or its request's scope ended.
type flight struct {
	done chan struct{}
	once sync.Once
	stop func() bool // ends the watch on the request's scope
}

// flights are the local.sends a Send service has under way, by request identity.
type flights struct {
	mu sync.Mutex
	m  map[sendKey]*flight
}

// sendWaiting, when not nil, is told that a send waits for the one of its identity under
// way: a readiness signal for tests.
var sendWaiting func()

// board makes the send of key the caller's to make, or returns the one under way. A
// send made lands when ctx, its request's scope, ends, if it has not before: a recording
// that failed out of its sight strands no retry for longer than its cell.
func (fs *flights) board(ctx context.Context, key sendKey) (f *flight, mine bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[key]; f != nil {
		return f, false
	}
	f = &flight{done: make(chan struct{})}
	f.stop = context.AfterFunc(ctx, func() { fs.land(key, f) })
	fs.m[key] = f
	return f, true
}

// land ends f, the send of key.
func (fs *flights) land(key sendKey, f *flight) {
	fs.mu.Lock()
	if fs.m[key] == f {
		delete(fs.m, key)
	}
	fs.mu.Unlock()
	f.once.Do(func() {
		f.stop()
		close(f.done)
	})
}

// Send is the local.send service: the text is reviewed by the cell's pinned policy, then
// recorded. The request and the effect's start are committed before the review; the
// event (when allowed) and the receipt commit together after it, so a host that dies
// between leaves no event and no receipt. One request identity (session, execution,
// request id) makes one effect: a retry while the first is under way waits for it, and
// a retry after it returns the receipt already given.
func (m *Manager) Send(speech Speech) host.Service {
	sends := &flights{m: map[sendKey]*flight{}}
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var p struct {
			Text *string `json:"text"`
		}
		if err := req.Decode(&p); err != nil || p.Text == nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, `local.send takes {"text": "<what to say>"}`))
		}
		key := sendKey{req.Session.ID, req.ExecutionID, req.RequestID}
		f, mine := sends.board(ctx, key)
		for !mine {
			if sendWaiting != nil {
				sendWaiting()
			}
			select {
			case <-f.done:
			case <-ctx.Done():
				return host.Reply(host.Error(host.CodeExecutionEnded, "execution %s ended while request %s waited for "+
					"the send of the same request identity", req.ExecutionID, req.RequestID))
			}
			f, mine = sends.board(ctx, key)
		}
		out := m.send(ctx, req, *p.Text, speech)
		if out.Commit == nil {
			sends.land(key, f)
			return out
		}
		commit := out.Commit
		out.Commit = func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
			reply, err := commit(tx, req)
			if err != nil {
				sends.land(key, f) // rolled back: a retry finds the effect open
			}
			return reply, err
		}
		told := out.Committed
		out.Committed = func(reply wire.Reply) {
			sends.land(key, f)
			told(reply)
		}
		return out
	})
}

// send makes the local.send of req, the one of its identity under way: it returns the
// receipt already given, or reviews text and returns the Outcome that records it.
func (m *Manager) send(ctx context.Context, req *host.Request, text string, speech Speech) host.Outcome {
	prior, found, err := m.store.EffectOf(ctx, req.Session.ID, req.ExecutionID, req.RequestID, SendMethod)
	switch {
	case err != nil:
		return host.Reply(host.Error(host.CodeStoreFailed, "%v", err))
	case found && len(prior.Receipt) > 0 && string(prior.Receipt) != "null":
		return host.Reply(host.OK(prior.Receipt))
	case found:
		return host.Reply(unresolved(req, prior.ID))
	}
	var effect int64
	var started bool
	if err := req.Record(ctx, func(tx *store.Tx) error {
		var err error
		effect, started, err = tx.StartEffectOnce(req.Session.ID, req.ID(), SendMethod, map[string]any{"text": text})
		return err
	}); err != nil {
		return host.Reply(host.Error(host.CodeStoreFailed, "recording the send: %v", err))
	}
	if !started {
		return host.Reply(unresolved(req, effect))
	}
	review := m.Pinned(req.ExecutionID).Review(ctx, effect, text)
	receipt := Receipt{EffectID: effect, Status: "held"}
	return host.Outcome{
		Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
			if review.Action == "allow" {
				ev, err := tx.AppendEvent(req.Session.ID, store.SourceAgent, map[string]any{"text": text, "effect_id": effect})
				if err != nil {
					return wire.Reply{}, err
				}
				receipt.Status, receipt.EventID = "confirmed", &ev.ID
			} else {
				receipt.Reason = &review.Reason
			}
			if err := tx.FinishEffect(req.Session.ID, effect, receipt); err != nil {
				return wire.Reply{}, err
			}
			return host.OK(receipt), nil
		},
		Committed: func(wire.Reply) {
			if speech != nil {
				speech(text, receipt)
			}
		},
	}
}

// unresolved is the refusal of a send whose identity started effect already, an effect
// whose outcome was never recorded: it is not made a second time.
func unresolved(req *host.Request, effect int64) wire.Reply {
	return host.Error(CodeSendUnresolved, "request %s of execution %s started effect %d, whose outcome was never "+
		"recorded; it is not sent again", req.RequestID, req.ExecutionID, effect)
}

// List is the hooks.list service: the behavior epoch, the active release, and each slot
// with its handler.
func (m *Manager) List() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var none struct{}
		if err := req.Decode(&none); err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "hooks.list takes no parameters: %v", err))
		}
		p := m.Pinned(req.ExecutionID)
		handlers, err := p.Handlers()
		if err != nil {
			return host.Reply(host.Error(CodeInvalidRelease, "%v", err))
		}
		slots := make([]map[string]string, 0, len(handlers))
		for _, slot := range append(slices.Clone(wire.Slots), wire.OptionalSlots...) {
			if handler, ok := handlers[slot]; ok {
				slots = append(slots, map[string]string{"slot": slot, "handler": handler})
			}
		}
		return host.Reply(host.OK(map[string]any{"epoch": p.Epoch(), "release": p.ReleaseID(), "slots": slots}))
	})
}

// SlotDescriptions say what each slot is given and may decide.
var SlotDescriptions = map[string]map[string]any{
	wire.SlotAttentionPlan: {
		"input": map[string]string{"event_id": "integer > 0", "received_at_ms": "integer >= 0",
			"source": "operator | peer | discord.dm | discord.mention | discord.ambient, as the host classified it"},
		"decisions": []string{fmt.Sprintf("wake {priority: 0..%d}", TopPriority),
			fmt.Sprintf("defer {seconds: (0, %d]}", MaxDeferSeconds), "ignore {reason}"},
		"rules": []string{"operator input always wakes, at top priority, whatever the hook says",
			fmt.Sprintf("no other source wakes at priority %d", TopPriority),
			"a hook that fails or times out: operator input wakes; others are deferred 60 s"},
	},
	wire.SlotDeliveryReview: {
		"input":     map[string]string{"effect_id": "integer > 0", "destination": "operator", "text": fmt.Sprintf("1..%d characters", MaxSendText)},
		"decisions": []string{"allow", "hold {reason}"},
		"rules":     []string{"text outside the bounds is held unasked", "anything but a plain allow holds the send"},
	},
	wire.SlotExecutionReview: {
		"input": map[string]string{"turn": "integer > 0, the agent's turn", "cell": "the cell's id, c-N",
			"code": fmt.Sprintf("the cell's code, at most %d bytes", MaxReviewCode)},
		"decisions": []string{"allow", "hold {reason}"},
		"rules": []string{"a release may leave the slot out: kiln.toml's [agent] review decides then (allow by default)",
			"kiln.toml's review = \"hold\" holds every cell unasked", "a longer cell is held unasked",
			"anything but a plain allow holds the cell until the operator approves or rejects it"},
	},
}

// Describe is the hooks.describe service: one slot, its handler, input and decisions.
func (m *Manager) Describe() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var p struct {
			Slot string `json:"slot"`
		}
		if err := req.Decode(&p); err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, `hooks.describe takes {"slot": "<slot>"}`))
		}
		desc, ok := SlotDescriptions[p.Slot]
		if !ok {
			return host.Reply(host.Error(CodeUnknownSlot, "no slot %q; the slots are %q", p.Slot,
				append(slices.Clone(wire.Slots), wire.OptionalSlots...)))
		}
		handlers, err := m.Pinned(req.ExecutionID).Handlers()
		if err != nil {
			return host.Reply(host.Error(CodeInvalidRelease, "%v", err))
		}
		out := map[string]any{"slot": p.Slot, "handler": handlers[p.Slot], "budget_ms": Budget.Milliseconds()}
		for k, v := range desc {
			out[k] = v
		}
		return host.Reply(host.OK(out))
	})
}

// ActivateService is the behavior.activate service: Activate, answered.
func (m *Manager) ActivateService() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var p struct {
			Path          string `json:"path"`
			ExpectedEpoch *int64 `json:"expected_epoch"`
		}
		if err := req.Decode(&p); err != nil || p.Path == "" || p.ExpectedEpoch == nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, `behavior.activate takes {"path": "<data>/releases/<identity>", "expected_epoch": N}`))
		}
		b, err := m.Activate(ctx, p.Path, *p.ExpectedEpoch)
		switch {
		case errors.Is(err, store.ErrStaleEpoch):
			return host.Reply(host.Error(CodeStaleEpoch, "%v; nothing changed", err))
		case err != nil:
			return host.Reply(host.Error(CodeInvalidRelease, "%v; nothing changed", err))
		}
		return host.Reply(host.OK(b))
	})
}
