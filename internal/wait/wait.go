// Package wait serves runtime.wait, the durable wait that ends a cell's turn: the host
// records the deadline and state and checks for already-pending input in one
// transaction. With input pending, the wait returns at once with references to it; with
// none, the reply ends the execution's turn — its cell is recorded as yielded, code below
// the await does not run normally, and the execution can make no more requests. No Python
// continuation is kept: a wakeup starts a future cell.
package wait

import (
	"context"
	"math"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// Method is the method this package serves.
const Method = "runtime.wait"

// MaxSeconds is the longest wait; seconds must be null, or finite, > 0 and ≤ MaxSeconds.
const MaxSeconds = 600

// MaxReasonBytes bounds a wait's reason, in UTF-8 bytes.
const MaxReasonBytes = 4096

// Reply statuses.
const (
	StatusYielded      = "yielded"       // the turn ended; the session waits
	StatusInputPending = "input_pending" // input was already pending; the wait returned at once
)

// Service is the runtime.wait service.
type Service struct{}

// params are runtime.wait's fields.
type params struct {
	Seconds jsontext.Value `json:"seconds"`
	Reason  *string        `json:"reason"`
}

// Serve implements host.Service.
func (Service) Serve(_ context.Context, req *host.Request) host.Outcome {
	var p params
	if err := req.Decode(&p); err != nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "runtime.wait takes seconds and reason: %v", err))
	}
	seconds, msg := checkSeconds(p.Seconds)
	if msg != "" {
		return host.Reply(host.Error(host.CodeInvalidRequest, "%s", msg))
	}
	reason := ""
	if p.Reason != nil {
		reason = *p.Reason
	}
	if len(reason) > MaxReasonBytes || !utf8.ValidString(reason) {
		return host.Reply(host.Error(host.CodeInvalidRequest, "reason must be text of at most %d bytes", MaxReasonBytes))
	}
	return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
		pending, err := tx.PendingEvents(req.Session.ID, host.MaxPendingRefs)
		if err != nil {
			return wire.Reply{}, err
		}
		w := store.Wait{RequestID: req.ID(), SessionID: req.Session.ID, ExecutionID: req.ExecutionID,
			Seconds: seconds, Reason: reason, State: store.WaitWaiting}
		if seconds != nil {
			deadline := tx.Now().Add(time.Duration(*seconds * float64(time.Second)))
			w.Deadline = &deadline
		}
		if len(pending) > 0 {
			last := pending[len(pending)-1].ID
			w.State, w.EventID = store.WaitInputPending, &last
			if err := tx.Deliver(req.Session.ID, last); err != nil {
				return wire.Reply{}, err
			}
		}
		if err := tx.InsertWait(&w); err != nil {
			return wire.Reply{}, err
		}
		value := map[string]any{"wait": host.WaitRef(w.ID), "reason": reason, "deadline": nil, "deadline_ms": nil}
		if w.Deadline != nil {
			value["deadline"], value["deadline_ms"] = host.Stamp(*w.Deadline), w.Deadline.UnixMilli()
		}
		if len(pending) > 0 {
			refs := make([]string, len(pending))
			for i, ev := range pending {
				refs[i] = host.EventRef(ev.ID)
			}
			value["status"], value["inputs"] = StatusInputPending, refs
			return host.OK(value), nil
		}
		value["status"] = StatusYielded
		req.EndTurn()
		return host.OK(value), nil
	}}
}

// checkSeconds reads seconds: null, or a finite number > 0 and ≤ MaxSeconds. It returns
// a refusal message for anything else.
func checkSeconds(v jsontext.Value) (*float64, string) {
	const rule = "seconds must be null or a finite number > 0 and <= 600"
	switch v.Kind() {
	case 0, 'n':
		return nil, ""
	case '0':
	default:
		return nil, rule + ", not " + string(v)
	}
	var s float64
	if err := json.Unmarshal(v, &s); err != nil || math.IsNaN(s) || math.IsInf(s, 0) || s <= 0 || s > MaxSeconds {
		return nil, rule + ", not " + string(v)
	}
	return &s, ""
}
