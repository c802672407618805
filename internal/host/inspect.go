package host

import (
	"context"
	"time"

	"github.com/kilnrt/kiln/internal/jsonbuf"
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
	now := req.router.store.Now()
	in := inspection{
		ExecutionID:   req.ExecutionID,
		Generation:    req.Generation,
		Now:           now,
		PendingAsOf:   asOf,
		PendingInputs: refs,
		RequestID:     req.RequestID,
		RequestsLimit: MaxRequestsPerCell,
		RequestsMade:  req.Count,
		SessionID:     req.Session.Name,
	}
	value, err := in.appendJSON(make([]byte, 0, 256+len(in.SessionID)+16*len(refs)))
	if err != nil {
		return Reply(Error(CodeStoreFailed, "encoding the reply: %v", err))
	}
	return Reply(wire.Reply{Kind: wire.ReplyOK, Value: value})
}

// inspection is runtime.inspect's reply.
type inspection struct {
	ExecutionID   string
	Generation    string
	Now           time.Time
	PendingAsOf   time.Time // when PendingInputs was read
	PendingInputs []string
	RequestID     string
	RequestsLimit int
	RequestsMade  int
	SessionID     string
}

// appendJSON appends the reply's JSON object to dst, its members sorted by name as OK
// sorts them; it is made by hand because a cell may ask for it a hundred times in a row.
func (in inspection) appendJSON(dst []byte) ([]byte, error) {
	b := jsonbuf.New(dst)
	b.Raw(`{"execution_id":`)
	b.String(in.ExecutionID)
	b.Raw(`,"generation":`)
	b.String(in.Generation)
	b.Raw(`,"now":`)
	b.String(Stamp(in.Now))
	b.Raw(`,"now_ms":`)
	b.Int(in.Now.UnixMilli())
	b.Raw(`,"pending_as_of_ms":`)
	b.Int(in.PendingAsOf.UnixMilli())
	b.Raw(`,"pending_inputs":[`)
	for i, ref := range in.PendingInputs {
		if i > 0 {
			b.Raw(",")
		}
		b.String(ref)
	}
	b.Raw(`],"request_id":`)
	b.String(in.RequestID)
	b.Raw(`,"requests_limit":`)
	b.Int(int64(in.RequestsLimit))
	b.Raw(`,"requests_made":`)
	b.Int(int64(in.RequestsMade))
	b.Raw(`,"session_id":`)
	b.String(in.SessionID)
	b.Raw("}")
	return b.Bytes()
}
