package host

import (
	"context"
	"time"

	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// TimeLayout is the specification's `Z` shape of an instant: RFC 3339, UTC, in seconds.
const TimeLayout = "2006-01-02T15:04:05Z"

// Stamp is t in TimeLayout.
func Stamp(t time.Time) string { return t.UTC().Format(TimeLayout) }

// MaxPendingRefs is how many pending inputs one reply names (runtime.inspect, and
// runtime.wait, which hands over only those it names); the oldest come first.
const MaxPendingRefs = 64

// inspect answers runtime.inspect: the host clock and the request's scope.
func inspect(_ context.Context, req *Request) Outcome {
	var params struct{}
	if err := req.Decode(&params); err != nil {
		return Reply(Error(CodeInvalidRequest, "runtime.inspect takes no parameters: %v", err))
	}
	return Outcome{Commit: func(tx *store.Tx, req *Request) (wire.Reply, error) {
		pending, err := tx.PendingEvents(req.Session.ID, MaxPendingRefs)
		if err != nil {
			return wire.Reply{}, err
		}
		refs := make([]string, len(pending))
		for i, ev := range pending {
			refs[i] = EventRef(ev.ID)
		}
		now := tx.Now()
		return OK(map[string]any{
			"now":            Stamp(now),
			"now_ms":         now.UnixMilli(),
			"session_id":     req.Session.Name,
			"generation":     req.Generation,
			"execution_id":   req.ExecutionID,
			"request_id":     req.RequestID,
			"requests_made":  req.Count,
			"requests_limit": MaxRequestsPerCell,
			"pending_inputs": refs,
		}), nil
	}}
}
