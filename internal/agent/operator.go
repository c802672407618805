package agent

import (
	"context"
	"errors"
	"fmt"
)

// ErrNothingToFold is a fold or a reset asked of an agent whose conversation since the
// last fold is empty.
var ErrNothingToFold = errors.New("agent: the conversation since the last fold is empty")

// FoldNow folds the conversation at the operator's request, between turns: one model
// call summarizes it, the summary replaces it, and the head moves to the current
// instruction text, as a fold before a turn does. Its record, under the last turn, says
// the operator asked for it. A fold that fails is recorded and returned with its error,
// and the conversation is kept. Call it only while no turn runs (the actor's Between).
func (a *Agent) FoldNow(ctx context.Context) (Fold, error) {
	if len(a.conv) == 0 {
		return Fold{}, ErrNothingToFold
	}
	a.operatorFold = true
	defer func() { a.operatorFold = false }()
	t := &turn{id: a.turns, calls: a.lastCalls}
	rec, err := a.fold(ctx, t, nil, false)
	a.lastCalls = t.calls
	if rec == nil {
		return Fold{}, err
	}
	return *rec, err
}

// Reset begins a new transcript segment at the operator's request, between turns: the
// summary and the conversation are dropped without a model call, and the head moves to
// the current instruction text, so that the next turn starts from the instructions and
// its inputs alone. Nothing of the durable record is removed: a fold record (Reset)
// marks where the segment begins. Call it only while no turn runs.
func (a *Agent) Reset(ctx context.Context) (Fold, error) {
	if len(a.conv) == 0 && a.summary == "" {
		return Fold{}, ErrNothingToFold
	}
	rec := Fold{Turn: a.turns, Covers: len(a.conv), HeaderBefore: a.header.Digest, TokensBefore: a.estimate(),
		Operator: true, Reset: true}
	head, reason, err := a.sess.MoveHead(ctx, nil)
	if err != nil {
		return Fold{}, fmt.Errorf("agent: a reset: moving the head: %w", err)
	}
	rec.HeadReason, rec.HeaderAfter = reason, head.Digest
	if err := a.sess.Record(context.WithoutCancel(ctx), &rec); err != nil {
		return Fold{}, fmt.Errorf("%w: the reset: %w", errRecord, err)
	}
	a.header, a.summary, a.conv = head, "", nil
	a.sent, a.reported, a.reportedAt = -1, 0, 0
	a.foldFailures, a.foldAt = 0, 0
	a.rebase()
	return rec, nil
}
