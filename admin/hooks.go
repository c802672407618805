package admin

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/kilnrt/kiln/internal/datadir"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/wire"
)

// HookBudget is the time one invocation of a decision slot has from the moment the host
// asks, waiting for a hooks worker to start and for an earlier invocation included.
const HookBudget time.Duration = policy.Budget

// HookSlots are the decision slots a policy answers, in order: attention.plan (every
// input: wake, defer or ignore), delivery.review (every local.send: allow or hold), and
// execution.review (every cell of the agent, before it runs: allow or hold), which a
// release may leave out.
func HookSlots() []string { return append(slices.Clone(wire.Slots), wire.OptionalSlots...) }

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
	// Slots are every slot the release names, in the order of HookSlots.
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
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return Hooks{}, err
	}
	st, err := datadir.OpenExisting(ctx, dataDir, true)
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
	for _, slot := range HookSlots() {
		if handler, ok := handlers[slot]; ok {
			h.Slots = append(h.Slots, HookSlot{Slot: slot, Handler: handler})
		}
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
