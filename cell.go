package kiln

import (
	"time"

	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// Record is how one cell ended: its status, its bounded output, and its error. Its JSON
// (encoding/json, or any encoder that honours the field tags) is the record kiln exec
// --json prints.
type Record struct {
	// Session names the durable session the cell ran in; empty when the record is not a
	// session's.
	Session string `json:"session,omitempty"`
	// ID is the cell's id, "c-1" for a session's first cell: what Interrupt takes.
	ID string `json:"id"`
	// Generation is the worker generation the cell ran in, "g-1" for the first.
	Generation string `json:"generation"`
	// Status is how the cell ended.
	Status CellStatus `json:"status"`
	// StartedAt is when the host recorded the cell's start, and DurationMs the
	// milliseconds from it to the recorded end: the durable record's own times, which
	// kiln log shows too. Both are zero for a record that is not a session's.
	StartedAt  time.Time `json:"started_at"`
	DurationMs int64     `json:"duration_ms"`
	// Output is the cell's stdout and stderr, its displays and its result, in the order
	// the cell made them: adjacent writes to one stream merge into one record, and a
	// display between them splits it. The text is held to the per-cell bound of 65,536
	// bytes and 256 records, the displays to theirs (32 items, 8 MiB).
	Output []Output `json:"output"`
	// TruncatedBytes counts the output let go to keep within the bound.
	TruncatedBytes int64 `json:"truncated_bytes"`
	// Error is the error text of a cell that did not end ok or yielded (the traceback
	// of what it raised, or the host's reason); nil otherwise.
	Error *string `json:"error"`
	// Exception is what the cell raised, in parts; nil when it raised nothing, or the
	// record is the host's.
	Exception *Exception `json:"exception"`
	// RawStdout and RawStderr are the ends of what the cell wrote to the real
	// descriptors 1 and 2, its child processes included; nil when it wrote nothing there.
	RawStdout *RawTail `json:"raw_stdout,omitempty"`
	RawStderr *RawTail `json:"raw_stderr,omitempty"`
	// Limit names the workbench limit the cell hit; empty when it hit none.
	Limit CellLimit `json:"limit,omitempty"`
	// NamespaceLost says the generation ended with this cell: its variables are gone,
	// and the next cell runs in a new generation. It is also set on the record of a
	// cell that ran in a new namespace because the generation before it ended with no
	// cell running, and NamespaceLostReason says why.
	NamespaceLost       bool   `json:"namespace_lost"`
	NamespaceLostReason string `json:"namespace_lost_reason,omitempty"`
	// NotRun says the host refused the cell before a worker saw it (its source over the
	// size limit, or not UTF-8): it never ran, and Error says why.
	NotRun bool `json:"not_run,omitzero"`
	// DisplayDropped counts the MIME items of the cell's displays left out to keep
	// within the display bounds (each such display keeps its text/plain, with a note).
	DisplayDropped int64 `json:"display_dropped,omitzero"`
}

// Output is one record of a cell's output: its Stream, "stdout", "stderr" or "result",
// and its Text; or, for Stream "display", its MIME bundle in Data ("image/png" is
// base64, text types are text), "text/plain" always among them.
type Output struct {
	Stream string            `json:"stream"`
	Text   string            `json:"text,omitempty"`
	Data   map[string]string `json:"data,omitempty"`
}

// Exception is what a failed cell raised, in parts, as Jupyter's ename, evalue and
// traceback: its type's name, its value as str() gives it, and its traceback, the same
// text as the record's error.
type Exception struct {
	Type      string `json:"type"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// RawTail is the end of what a cell wrote to the worker's real stdout or stderr (fd 1
// or 2 directly, or through a child process): at most 8 KiB of Text, invalid UTF-8
// replaced, and DroppedBytes, the earlier bytes let go.
type RawTail struct {
	Text         string `json:"text"`
	DroppedBytes int64  `json:"dropped_bytes"`
}

// CellStatus is how a cell ended: a Record's Status.
type CellStatus string

// Cell statuses.
const (
	StatusOK          CellStatus = wire.StatusOK          // it ran to its end
	StatusError       CellStatus = wire.StatusError       // it raised, or the host refused it (Record.NotRun)
	StatusYielded     CellStatus = wire.StatusYielded     // it ended its turn waiting, as the host accepted
	StatusInterrupted CellStatus = wire.StatusInterrupted // it was interrupted: Interrupt, or its ctx ended
	// StatusFailed is the host's own record of a worker that died, or broke the
	// protocol, during the cell.
	StatusFailed CellStatus = worker.StatusFailed
)

// CellLimit names a workbench limit a cell hit: a Record's Limit.
type CellLimit string

// The limits a Record's Limit names: the workbench's MemoryBytes, CPUSeconds and
// MaxProcesses, and the deadline of a cell's ctx.
const (
	LimitMemory    CellLimit = worker.LimitMemory
	LimitCPU       CellLimit = worker.LimitCPU
	LimitTimeout   CellLimit = worker.LimitTimeout
	LimitProcesses CellLimit = worker.LimitProcesses
)

// recordFrom is the public record of the worker's r; its Output is never nil.
func recordFrom(r worker.Record) Record {
	out := make([]Output, len(r.Output))
	for i, o := range r.Output {
		out[i] = outputFrom(o)
	}
	return Record{
		Session:             r.Session,
		ID:                  r.ID,
		Generation:          r.Generation,
		Status:              CellStatus(r.Status),
		StartedAt:           r.StartedAt,
		DurationMs:          r.DurationMs,
		Output:              out,
		TruncatedBytes:      r.TruncatedBytes,
		Error:               r.Error,
		Exception:           exceptionFrom(r.Exception),
		RawStdout:           rawTailFrom(r.RawStdout),
		RawStderr:           rawTailFrom(r.RawStderr),
		Limit:               CellLimit(r.Limit),
		NamespaceLost:       r.NamespaceLost,
		NamespaceLostReason: r.NamespaceLostReason,
		NotRun:              r.NotRun,
		DisplayDropped:      r.DisplayDropped,
	}
}

// outputFrom is the public output record of o.
func outputFrom(o wire.Output) Output { return Output(o) }

// exceptionFrom is the public exception of e, nil for nil.
func exceptionFrom(e *wire.Exception) *Exception { return (*Exception)(e) }

// rawTailFrom is the public raw tail of t, nil for nil.
func rawTailFrom(t *worker.RawTail) *RawTail { return (*RawTail)(t) }
