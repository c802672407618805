package host

import (
	"context"
	"time"
)

// TimeLayout is the specification's `Z` shape of an instant: RFC 3339, UTC, in seconds.
const TimeLayout = "2006-01-02T15:04:05Z"

// Stamp is t in TimeLayout.
func Stamp(t time.Time) string { return t.UTC().Format(TimeLayout) }

// MaxPendingRefs is how many pending inputs one reply names (runtime.inspect, and
// runtime.wait, which hands over only those it names); the oldest come first.
const MaxPendingRefs = 64

// inspect answers runtime.inspect: the host clock and the request's scope.
func inspect(ctx context.Context, req *Request) Outcome {
	var params struct{}
	if err := req.Decode(&params); err != nil {
		return Reply(Error(CodeInvalidRequest, "runtime.inspect takes no parameters: %v", err))
	}
	pending, asOf, err := req.router.store.PendingEventsAsOf(ctx, req.Session.ID, MaxPendingRefs)
	if err != nil {
		return Reply(Error(CodeStoreFailed, "reading the pending inputs: %v", err))
	}
	refs := make([]string, len(pending))
	for i, ev := range pending {
		refs[i] = EventRef(ev.ID)
	}
	open, err := req.router.store.OpenWorkItems(ctx)
	if err != nil {
		return Reply(Error(CodeStoreFailed, "reading the work items: %v", err))
	}
	var orientation *string
	if d, err := req.router.store.OrientationDigest(ctx, req.Session.ID); err != nil {
		return Reply(Error(CodeStoreFailed, "reading the orientation: %v", err))
	} else if d != "" {
		orientation = &d
	}
	now := req.router.store.Now()
	return Reply(OK(inspection{
		OpenWorkItems:     open,
		OrientationDigest: orientation,
		ExecutionID:       req.ExecutionID,
		Generation:        req.Generation,
		Now:               Stamp(now),
		NowMS:             now.UnixMilli(),
		PendingAsOfMS:     asOf.UnixMilli(),
		PendingInputs:     refs,
		RequestID:         req.RequestID,
		RequestsLimit:     MaxRequestsPerCell,
		RequestsMade:      req.Count,
		SessionID:         req.Session.Name,
		Sandbox:           req.router.confinement(),
	}))
}

// inspection is runtime.inspect's reply.
type inspection struct {
	ExecutionID   string   `json:"execution_id"`
	Generation    string   `json:"generation"`
	Now           string   `json:"now"`
	NowMS         int64    `json:"now_ms"`
	PendingAsOfMS int64    `json:"pending_as_of_ms"` // when PendingInputs was read
	PendingInputs []string `json:"pending_inputs"`
	RequestID     string   `json:"request_id"`
	RequestsLimit int      `json:"requests_limit"`
	RequestsMade  int      `json:"requests_made"`
	SessionID     string   `json:"session_id"`
	// OpenWorkItems counts the data directory's open work items (maintenance.originate).
	OpenWorkItems int `json:"open_work_items"`
	// OrientationDigest is the digest of the orientation text the session runs under,
	// null when none is adopted.
	OrientationDigest *string `json:"orientation_digest"`
	// Sandbox is what confines the generation (kiln's extension), absent when the
	// host did not say.
	Sandbox any `json:"sandbox,omitempty"`
}
