package kiln

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/wire"
)

// HookBudget is the time one invocation of a decision slot has from the moment the host
// asks, waiting for a hooks worker to start and for an earlier invocation included.
const HookBudget time.Duration = policy.Budget

// MaxSendText bounds the text of one local.send, and of one operator input, in
// characters.
const MaxSendText = policy.MaxSendText

// HookSlots are the decision slots a policy answers, in order: attention.plan (every
// input: wake, defer or ignore) and delivery.review (every local.send: allow or hold).
func HookSlots() []string { return slices.Clone(wire.Slots) }

// HookSlot is a decision slot and the entrypoint that answers it.
type HookSlot struct {
	// Slot is the slot's name, one of HookSlots.
	Slot string `json:"slot"`
	// Handler is the entrypoint of the active release's manifest, "module:attribute".
	Handler string `json:"handler"`
}

// Hooks are the active policy's slots and their handlers.
type Hooks struct {
	// Behavior is the epoch and the release whose handlers these are.
	Behavior Behavior `json:"behavior"`
	// Slots are every slot, in the order of HookSlots.
	Slots []HookSlot `json:"slots"`
}

// Handler is the handler of slot, "" when there is no such slot.
func (h Hooks) Handler(slot string) string {
	for _, s := range h.Slots {
		if s.Slot == slot {
			return s.Handler
		}
	}
	return ""
}

// ActiveHooks reads the behavior epoch of dataDir's record, which must exist, and the
// handlers of the release it names, read-only. A stored release that no longer checks
// is an error saying why.
func ActiveHooks(ctx context.Context, dataDir string) (Hooks, error) {
	dataDir, err := dataDirOrDefault(dataDir)
	if err != nil {
		return Hooks{}, err
	}
	st, err := openExisting(ctx, dataDir, true)
	if err != nil {
		return Hooks{}, err
	}
	defer st.Close()
	b, err := st.Behavior(ctx)
	if err != nil {
		return Hooks{}, err
	}
	h := Hooks{Behavior: Behavior(b)}
	m, err := policy.NewManager(ctx, st, dataDir, policy.Config{})
	if err != nil {
		return h, err
	}
	defer m.Close()
	handlers, err := m.Active().Handlers()
	if err != nil {
		return h, err
	}
	for _, slot := range wire.Slots {
		h.Slots = append(h.Slots, HookSlot{Slot: slot, Handler: handlers[slot]})
	}
	return h, nil
}

// SlotDescription says what a decision slot is given, what it may decide, and the rules
// the host holds its answers to.
type SlotDescription struct {
	// Slot is the slot's name, one of HookSlots.
	Slot string `json:"slot"`
	// Input names each member of what the slot is given, with what it holds.
	Input map[string]string `json:"input"`
	// Decisions are the answers the slot may give.
	Decisions []string `json:"decisions"`
	// Rules are what the host does with an answer, whatever the hook says.
	Rules []string `json:"rules"`
}

// DescribeSlot describes slot, ok false when there is no such slot.
func DescribeSlot(slot string) (d SlotDescription, ok bool) {
	desc, ok := policy.SlotDescriptions[slot]
	if !ok {
		return SlotDescription{}, false
	}
	input, _ := desc["input"].(map[string]string)
	decisions, _ := desc["decisions"].([]string)
	rules, _ := desc["rules"].([]string)
	// Copies: the descriptions are the ones hooks.describe serves cells.
	return SlotDescription{Slot: slot, Input: maps.Clone(input), Decisions: slices.Clone(decisions),
		Rules: slices.Clone(rules)}, true
}

// AttentionAction is what an attention.plan decision does with an input.
type AttentionAction string

// The actions of attention.plan.
const (
	AttentionWake   AttentionAction = "wake"   // wake the agent, at Priority
	AttentionDefer  AttentionAction = "defer"  // plan the input again after Seconds
	AttentionIgnore AttentionAction = "ignore" // never wake for it, for Reason
)

// Attention is an attention.plan decision about an input, as the host acted on it.
type Attention struct {
	// Action is what the decision does: wake, defer or ignore.
	Action AttentionAction `json:"action"`
	// Priority is a wake's priority, 0..100; only operator input wakes at 100.
	Priority *int `json:"priority,omitempty"`
	// Seconds is how long a defer waits.
	Seconds *float64 `json:"seconds,omitempty"`
	// Reason is why the input is ignored.
	Reason string `json:"reason,omitempty"`
	// Note says what the host changed or supplied, and why, when the hook's own decision
	// was not taken as it was.
	Note string `json:"note,omitempty"`
}

// String says the decision in a line: "wake, priority 100", "defer 60s",
// "ignore: REASON", with the note in parentheses.
func (a Attention) String() string {
	var s string
	switch {
	case a.Action == AttentionWake && a.Priority != nil:
		s = "wake, priority " + strconv.Itoa(*a.Priority)
	case a.Action == AttentionDefer && a.Seconds != nil:
		s = fmt.Sprintf("defer %gs", *a.Seconds)
	case a.Action == AttentionIgnore:
		s = "ignore: " + a.Reason
	default:
		s = string(a.Action)
	}
	if a.Note != "" {
		s += " (" + a.Note + ")"
	}
	return s
}
