package store

import (
	"context"
	"testing"
)

type pass struct {
	frames, copied int
	held           bool
}

// checkpointsOf makes s's checkpointer report each pass on the returned channel.
func checkpointsOf(s *Store) <-chan pass {
	passes := make(chan pass, 16)
	sqliteOf(s).ckpt.passed = func(frames, copied int, held bool) { passes <- pass{frames, copied, held} }
	return passes
}

// commit commits n transactions, each appending an event.
func commit(t *testing.T, s *Store, session int64, n int) {
	t.Helper()
	for range n {
		if _, err := s.AppendEvent(context.Background(), session, SourceOperator, map[string]string{"text": "x"}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCommitsLeaveCheckpointsToTheCheckpointer(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	var auto int
	if err := sqliteOf(s).db.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil || auto != 0 {
		t.Fatalf("the writing connection's wal_autocheckpoint: %d, %v; want 0", auto, err)
	}
	sess, err := s.CreateSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	passes := checkpointsOf(s)
	// The Store's commits so far (migrations are not its commits) and these reach
	// CheckpointCommits exactly.
	commit(t, s, sess.ID, CheckpointCommits-int(s.commits.Load()))
	p := <-passes
	if p.held || p.copied == 0 || p.copied != p.frames {
		t.Errorf("the pass after %d commits: %+v; want every frame copied, writes not held", CheckpointCommits, p)
	}
	commit(t, s, sess.ID, CheckpointCommits)
	if p := <-passes; p.held || p.copied == 0 {
		t.Errorf("the second pass: %+v; want frames copied, writes not held", p)
	}
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
}

func TestAPassPastCatchUpFramesHoldsTheWrites(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	sess, err := s.CreateSession(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	passes := checkpointsOf(s)
	var frames int
	if err := sqliteOf(s).db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(new(int), &frames, new(int)); err != nil {
		t.Fatal(err)
	}
	sqliteOf(s).ckpt.catchUp = frames + 1 // one more frame than the WAL holds now: a commit passes it
	commit(t, s, sess.ID, CheckpointCommits-int(s.commits.Load()))
	first, second := <-passes, <-passes
	if first.held || first.frames <= sqliteOf(s).ckpt.catchUp || !second.held {
		t.Errorf("passes %+v, %+v; want one over %d frames, then one holding the writes", first, second, sqliteOf(s).ckpt.catchUp)
	}
}
