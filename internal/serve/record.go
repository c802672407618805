package serve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/store"
)

// Record is an execution as the durable record holds it, as a client is shown it.
type Record struct {
	ID             string         `json:"id"` // <session>:c-N
	Session        string         `json:"session"`
	Cell           string         `json:"cell"`
	Generation     string         `json:"generation"`
	Status         string         `json:"status"` // running until the end is recorded
	ReportedStatus *string        `json:"reported_status,omitempty"`
	Output         jsontext.Value `json:"output"` // [{stream, text}], null while running
	TruncatedBytes int64          `json:"truncated_bytes"`
	Error          *string        `json:"error"`
	Exception      jsontext.Value `json:"exception"` // what the cell raised, in parts; null if nothing
	NamespaceLost  bool           `json:"namespace_lost"`
	Limit          string         `json:"limit,omitempty"` // the limit that ended the cell: memory, cpu_seconds or timeout
	// FreshNamespace says the cell is the first of a new generation after earlier cells
	// of the session: what they defined is gone.
	FreshNamespace bool       `json:"fresh_namespace"`
	StartedAt      time.Time  `json:"started_at"`
	EndedAt        *time.Time `json:"ended_at"`
	CodeSHA256     string     `json:"code_sha256"`
}

// Running says the execution has no recorded end.
func (r Record) Running() bool { return r.Status == store.StatusRunning }

// Record returns the durable record of the session's cell.
func (s *Session) Record(ctx context.Context, cell string) (Record, error) {
	sid := s.StoreID()
	e, err := s.d.store.ExecutionByCell(ctx, sid, cell)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("%w: %s", ErrNoCell, ExecutionID(s.id, cell))
	}
	if err != nil {
		return Record{}, err
	}
	fresh := false
	if n, _ := strconv.ParseInt(strings.TrimPrefix(cell, "c-"), 10, 64); n > 1 {
		prev, err := s.d.store.ExecutionByCell(ctx, sid, "c-"+strconv.FormatInt(n-1, 10))
		fresh = err == nil && prev.Generation != e.Generation
	}
	return recordOf(s.id, e, fresh), nil
}

// recordOf is execution e of session sid as a client is shown it; fresh says it is the
// first cell of a new generation after earlier cells.
func recordOf(sid string, e store.Execution, fresh bool) Record {
	r := Record{ID: ExecutionID(sid, e.CellID), Session: sid, Cell: e.CellID, Generation: e.Generation,
		Status: e.Status, ReportedStatus: e.ReportedStatus, Output: e.Output, TruncatedBytes: e.TruncatedBytes,
		Error: e.Error, NamespaceLost: e.NamespaceLost, StartedAt: e.StartedAt, EndedAt: e.EndedAt,
		CodeSHA256: e.CodeSHA256, Exception: e.Exception, Limit: e.Limit, FreshNamespace: fresh}
	if len(r.Exception) == 0 {
		r.Exception = jsontext.Value("null")
	}
	return r
}

// Wait waits up to wait for x to end, or for ctx, and returns its record as it then is.
// A ctx ended with the cause ErrClosed is a daemon that stops: its Shutdown interrupts
// the running cells and records their ends at once, so Wait waits for x's end and
// returns that record, not the running one or ctx's error.
func (s *Session) Wait(ctx context.Context, x *Execution, wait time.Duration) (Record, error) {
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-x.done:
		case <-t.C:
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), ErrClosed) {
				<-x.done
				ctx = context.WithoutCancel(ctx)
			}
		}
		t.Stop()
	}
	select {
	case <-x.done:
		if x.final != nil { // as recorded, with no read: the record reads so from now on
			return *x.final, nil
		}
	default:
	}
	return s.Record(ctx, x.cell)
}
