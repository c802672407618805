package serve

import (
	"context"
	"time"

	"github.com/kilnrt/kiln/internal/store"
)

// MaxEventBatch is how many journal entries one read of an event stream takes.
const MaxEventBatch = 256

// MaxEventBatchBytes bounds the text of the records one read of an event stream
// takes, past the first: a cell's record may hold megabytes of output and displays.
const MaxEventBatchBytes = 4 << 20

// Events returns the journal entries of the record after seq — of session (its store
// id), or of every session for 0 — at most MaxEventBatch, and no more after the text
// of their records passes MaxEventBatchBytes. When there are none yet it waits for a
// commit that adds some (a commit of another session does not wake it), for ctx to end, or for wait to pass (then it returns none); a
// wait of 0 returns at once.
func (d *Daemon) Events(ctx context.Context, session, after int64, wait time.Duration) ([]store.Entry, error) {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		changed := d.store.Watch(session) // before the read: a commit after it wakes the wait
		entries, err := d.store.Log(ctx, store.LogFilter{Session: session, Since: after, Limit: MaxEventBatch, Bytes: MaxEventBatchBytes})
		if err != nil || len(entries) > 0 || wait == 0 {
			return entries, err
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
