package client

import (
	"fmt"
	"strconv"
)

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

// Input is an operator input as it was recorded, by a daemon (Daemon.Send) or without
// one (admin.Send).
type Input struct {
	ID        int64     `json:"id"`
	Ref       string    `json:"ref"`       // event:<id>
	Attention Attention `json:"attention"` // the attention.plan decision
}
