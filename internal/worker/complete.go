package worker

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/wire"
)

// startOperation makes the generation busy with operation id, started by sending m.
func (w *Worker) startOperation(id string, m wire.Message) (*operation, error) {
	op := &operation{id: id, result: make(chan wire.Result, 1), interrupted: make(chan struct{})}
	op.ctx, op.cancel = context.WithCancel(context.Background())
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.setState(Busy); err != nil {
		op.cancel()
		return nil, err
	}
	w.op = op
	if err := w.send(m, nil); err != nil {
		w.op = nil
		w.setState(Idle)
		op.cancel()
		return nil, err
	}
	return op, nil
}

// completeTimeout bounds a completion: the worker answers it from what it holds, though
// the lookups of a completion after a dot run the namespace's own code.
const completeTimeout = 5 * time.Second

// ErrCompletion is a completion the worker did not answer with matches: abandoned at
// its timeout or by its caller, and interrupted, or answered with a failure. The
// generation goes on.
var ErrCompletion = errors.New("worker: completion not answered")

// Complete asks an idle workbench, as operation id, for the names that complete text in
// its namespace. A completion not answered within completeTimeout, or before ctx ends,
// is interrupted as a cell is and ends with ErrCompletion, the namespace intact; only a
// worker that does not stop within the interrupt grace loses its generation.
func (w *Worker) Complete(ctx context.Context, id, text string) ([]string, error) {
	if w.cfg.Role != wire.RoleWorkbench {
		return nil, fmt.Errorf("worker: complete on a %s worker", w.cfg.Role)
	}
	if !wire.ValidIdentifier(id) {
		return nil, fmt.Errorf("worker: invalid completion id %q", id)
	}
	if len(text) > wire.MaxCompleteBytes {
		return nil, fmt.Errorf("worker: completion text of %d bytes, over %d", len(text), wire.MaxCompleteBytes)
	}
	op, err := w.startOperation(id, wire.Complete{ID: id, Text: text})
	if err != nil {
		return nil, err
	}
	defer op.cancel()
	timeout := time.NewTimer(completeTimeout)
	defer timeout.Stop()
	var abandoned error // why the completion was interrupted
	var grace, resignal <-chan time.Time
	cancelled := ctx.Done()
	for {
		select {
		case res := <-op.result:
			w.finish(op, res)
			switch {
			case res.Kind == wire.ResultCompletion && abandoned == nil:
				return res.Matches, nil
			case res.Kind == wire.ResultCompletion, res.Kind == wire.ResultFailed:
				if abandoned != nil {
					return nil, fmt.Errorf("%w: %s: %w", ErrCompletion, id, abandoned)
				}
				return nil, fmt.Errorf("%w: %s: %s", ErrCompletion, id, derefOr(res.Error, "it failed"))
			}
			err := fmt.Errorf("worker: a %s result for completion %s", res.Kind, id)
			w.invalidate(err)
			return nil, err
		case <-timeout.C:
			abandoned = fmt.Errorf("not answered within %s", completeTimeout)
		case <-cancelled:
			abandoned = ctx.Err()
		case <-resignal:
			w.proc.Signal(syscall.SIGINT)
			continue
		case <-grace:
			err := fmt.Errorf("%w (%s): completion %s", ErrInterruptTimeout, w.cfg.InterruptGrace, id)
			w.invalidate(err)
			return nil, err
		case <-w.dead:
			return nil, fmt.Errorf("%w during completion %s: %w", ErrDead, id, w.Err())
		}
		if grace == nil && abandoned != nil {
			// Interrupted as a cell is: the frame, and SIGINT until it is answered.
			timeout.Stop()
			cancelled = nil
			go w.Interrupt(id)
			g := time.NewTimer(w.cfg.InterruptGrace)
			defer g.Stop()
			grace = g.C
			r := time.NewTicker(resignalInterval)
			defer r.Stop()
			resignal = r.C
		}
	}
}
