package worker

import (
	"context"
	"fmt"
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

// completeTimeout bounds a completion: the worker answers it from what it holds.
const completeTimeout = 5 * time.Second

// Complete asks an idle workbench, as operation id, for the names that complete text in
// its namespace. A worker that does not answer within completeTimeout, or answers
// otherwise than with a completion, loses its generation.
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
	select {
	case res := <-op.result:
		w.finish(op, res)
		if res.Kind != wire.ResultCompletion {
			err := fmt.Errorf("worker: a %s result for completion %s", res.Kind, id)
			w.invalidate(err)
			return nil, err
		}
		return res.Matches, nil
	case <-timeout.C:
		err := fmt.Errorf("worker: completion %s not answered within %s", id, completeTimeout)
		w.invalidate(err)
		return nil, err
	case <-ctx.Done():
		w.invalidate(fmt.Errorf("worker: completion %s abandoned: %w", id, ctx.Err()))
		return nil, ctx.Err()
	case <-w.dead:
		return nil, fmt.Errorf("%w during completion %s: %w", ErrDead, id, w.Err())
	}
}
