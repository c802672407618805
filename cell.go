package kiln

import (
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// Record is how one cell ended: its status, its bounded output, and its error. Its JSON
// (encoding/json, or any encoder that honours the field tags) is the record kiln exec
// --json prints. It is the worker's own record, one type from the worker to the
// embedder.
type Record = worker.Record

// Output is one record of a cell's output: its Stream, "stdout", "stderr" or "result",
// and its Text; or, for Stream "display", its MIME bundle in Data ("image/png" is
// base64, text types are text), "text/plain" always among them.
type Output = wire.Output

// Exception is what a failed cell raised, in parts, as Jupyter's ename, evalue and
// traceback: its type's name, its value as str() gives it, and its traceback, the same
// text as the record's error.
type Exception = wire.Exception

// RawTail is the end of what a cell wrote to the worker's real stdout or stderr (fd 1
// or 2 directly, or through a child process): at most 8 KiB of Text, invalid UTF-8
// replaced, and DroppedBytes, the earlier bytes let go.
type RawTail = worker.RawTail

// CellStatus is how a cell ended: a Record's Status.
type CellStatus = worker.Status

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
type CellLimit = worker.Limit

// The limits a Record's Limit names: the workbench's MemoryBytes, CPUSeconds and
// MaxProcesses, and the deadline of a cell's ctx.
const (
	LimitMemory    CellLimit = worker.LimitMemory
	LimitCPU       CellLimit = worker.LimitCPU
	LimitTimeout   CellLimit = worker.LimitTimeout
	LimitProcesses CellLimit = worker.LimitProcesses
)
