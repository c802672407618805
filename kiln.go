// Package kiln is a runtime for AI agents that act by writing Python. A Workbench is an
// agent's persistent Python session: cells run in one namespace, in a CPython worker the
// host starts, bounds, interrupts and replaces, over kiln's runtime control protocol.
//
//	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{})
//	if err != nil { … }
//	defer wb.Close()
//	rec, err := wb.Execute(ctx, "x = 20\nx + 1") // rec.Output: [{result 21}]
package kiln

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// Record is how one cell ended: its status, its bounded output, and its error text.
type Record = worker.Record

// Output is one record of a cell's output: its stream ("stdout", "stderr" or "result")
// and text.
type Output = wire.Output

// Cell statuses. StatusFailed is the host's own record of a worker that died, or broke
// the protocol, during the cell.
const (
	StatusOK          = wire.StatusOK
	StatusError       = wire.StatusError
	StatusYielded     = wire.StatusYielded
	StatusInterrupted = wire.StatusInterrupted
	StatusFailed      = worker.StatusFailed
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrClosed is an operation on a closed workbench.
	ErrClosed = errors.New("kiln: workbench closed")
	// ErrBusy is a cell started while another runs: a workbench runs one at a time.
	ErrBusy = worker.ErrIllegalTransition
	// ErrNotRunning is an interrupt for a cell that is not running.
	ErrNotRunning = worker.ErrNotRunning
)

// WorkbenchOptions configure a workbench. The zero value is ready to use.
type WorkbenchOptions struct {
	SessionID      string        // default "root"
	Python         string        // interpreter; default "python3" from PATH
	Dir            string        // the worker's working directory; default the host's
	Env            []string      // the worker's environment; nil means the host's
	StartTimeout   time.Duration // spawn to hello; default 10s
	InterruptGrace time.Duration // interrupt to hard stop; default 2s
	Logger         *slog.Logger  // nil discards
}

// Workbench is a persistent Python session. Its worker is replaced by a new generation
// when one dies or is hard-stopped; the record of the cell that ended it says so.
type Workbench struct {
	opts   WorkbenchOptions
	python interp.Interpreter

	mu          sync.Mutex
	current     *worker.Worker
	generations int
	cells       int
	closed      bool
}

// OpenWorkbench starts a workbench and its first generation.
func OpenWorkbench(ctx context.Context, opts WorkbenchOptions) (*Workbench, error) {
	if opts.SessionID == "" {
		opts.SessionID = "root"
	}
	if !wire.ValidIdentifier(opts.SessionID) {
		return nil, fmt.Errorf("kiln: session id %q is not 1..128 of [A-Za-z0-9_.-]", opts.SessionID)
	}
	if opts.Python == "" {
		opts.Python = "python3"
	}
	python, err := interp.Find(ctx, opts.Python)
	if err != nil {
		return nil, err
	}
	wb := &Workbench{opts: opts, python: python}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if _, err := wb.live(ctx); err != nil {
		return nil, err
	}
	return wb, nil
}

// live returns the current generation, starting a new one if there is none; wb.mu must
// be held.
func (wb *Workbench) live(ctx context.Context) (*worker.Worker, error) {
	if wb.closed {
		return nil, ErrClosed
	}
	if wb.current != nil && wb.current.State() != worker.Dead {
		return wb.current, nil
	}
	wb.generations++
	w, err := worker.Start(ctx, worker.Config{
		Python:         wb.python.Path,
		SessionID:      wb.opts.SessionID,
		Generation:     "g-" + strconv.Itoa(wb.generations),
		Dir:            wb.opts.Dir,
		Env:            wb.opts.Env,
		StartTimeout:   wb.opts.StartTimeout,
		InterruptGrace: wb.opts.InterruptGrace,
		Logger:         wb.opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	wb.current = w
	return w, nil
}

// Execute runs code as the next cell and returns its record. Cancelling ctx interrupts
// the cell. An error means the cell did not run: the workbench is closed or busy, or a
// new generation could not start.
func (wb *Workbench) Execute(ctx context.Context, code string) (Record, error) {
	wb.mu.Lock()
	w, err := wb.live(ctx)
	if err != nil {
		wb.mu.Unlock()
		return Record{}, err
	}
	wb.cells++
	id := "c-" + strconv.Itoa(wb.cells)
	wb.mu.Unlock()
	return w.Execute(ctx, id, code)
}

// Interrupt stops the running cell id (as Record.ID names it).
func (wb *Workbench) Interrupt(id string) error {
	wb.mu.Lock()
	w := wb.current
	wb.mu.Unlock()
	if w == nil {
		return fmt.Errorf("%w: %q", ErrNotRunning, id)
	}
	return w.Interrupt(id)
}

// Generation is the identifier of the current generation, "g-1" for the first.
func (wb *Workbench) Generation() string {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.current == nil {
		return ""
	}
	return wb.current.Generation()
}

// Close shuts the worker down, killing its process group if it has not exited within
// the grace.
func (wb *Workbench) Close() error {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.closed {
		return nil
	}
	wb.closed = true
	if wb.current == nil {
		return nil
	}
	return wb.current.Shutdown(worker.DefaultShutdownGrace)
}
