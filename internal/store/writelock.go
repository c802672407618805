package store

import "context"

// writeLock serializes a Store's writes. Unlike a sync.Mutex, a wait for it ends as
// soon as the waiter's context does (as tailscale's syncs.Semaphore.AcquireContext).
type writeLock chan struct{}

func newWriteLock() writeLock { return make(writeLock, 1) }

// lock takes the lock, or returns ctx's error once ctx is done first.
func (l writeLock) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	default:
	}
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlock gives the lock back.
func (l writeLock) unlock() { <-l }
