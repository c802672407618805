package store

import (
	"context"
	"database/sql"
	"log/slog"
)

// CheckpointCommits is how many commits of a Store wake its checkpointer. A cell commits
// two transactions of about four pages each, so this is about 500 pages, half what
// SQLite's own automatic checkpoint waits for; 256 and 512 measured no different
// (BenchmarkCellRecord).
const CheckpointCommits = 128

// CatchUpFrames is the WAL's size, in frames (pages: 16 MiB of 4 KiB pages), past which
// the checkpointer holds the Store's writes for one pass, so that the WAL starts over
// from its beginning. Trivial cells one after another pass it about every 500 cells.
const CatchUpFrames = 4096

// checkpointer copies the WAL's committed pages into the database file on a connection
// of its own, so that no commit does. SQLite's automatic checkpoint runs inside the
// commit that passes its threshold, and its two fsyncs cost that commit milliseconds; it
// is off on the writing connection (wal_autocheckpoint=0).
//
// A pass is PASSIVE: it waits for no one, and the Store's commits go on meanwhile. The
// WAL starts over from its beginning only when a write begins after a pass has copied
// everything; commits that land during every pass would leave it growing, so a pass
// that leaves more than CatchUpFrames in the WAL is followed by one that holds the
// Store's writes.
type checkpointer struct {
	db      *sql.DB // its own connection
	writeMu writeLock
	log     *slog.Logger
	catchUp int // CatchUpFrames; lower in tests

	wake   chan struct{} // capacity 1: a pass is due
	cancel context.CancelFunc
	done   chan struct{} // closed once run returns

	passed func(walFrames, copied int, held bool) // after each pass; for tests
}

// startCheckpointer opens the checkpointer's connection with dsn and starts it.
func startCheckpointer(dsn string, writeMu writeLock, log *slog.Logger) (*checkpointer, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	ctx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, writeMu: writeMu, log: log, catchUp: CatchUpFrames,
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go c.run(ctx)
	return c, nil
}

// nudge makes a pass due, without waiting.
func (c *checkpointer) nudge() {
	select {
	case c.wake <- struct{}{}:
	default: // one is due already
	}
}

func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		if frames, err := c.pass(ctx, false); err == nil && frames > c.catchUp {
			if c.writeMu.lock(ctx) != nil {
				return // closing
			}
			c.pass(ctx, true)
			c.writeMu.unlock()
		}
	}
}

// pass runs one PASSIVE checkpoint, with the Store's writes held or not; it returns the
// frames in the WAL.
func (c *checkpointer) pass(ctx context.Context, held bool) (walFrames int, err error) {
	var busy, copied int
	err = c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &walFrames, &copied)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("store: checkpoint", "err", err)
		}
		return 0, err
	}
	if c.passed != nil {
		c.passed(walFrames, copied, held)
	}
	return walFrames, nil
}

// close stops the checkpointer, ending a pass under way, and closes its connection.
func (c *checkpointer) close() error {
	c.cancel()
	<-c.done
	return c.db.Close()
}
