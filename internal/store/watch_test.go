package store

import (
	"context"
	"strings"
	"testing"
)

// closed says whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A commit wakes the readers of the session it journals and every session's readers,
// and no reader of another session.
func TestWatchWakesOnlyItsSession(t *testing.T) {
	ctx := context.Background()
	st, a := openSession(t, t.TempDir())
	b, err := st.CreateSession(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	ofA, ofB, ofAll := st.Watch(a.ID), st.Watch(b.ID), st.Watch(0)
	if st.Watch(a.ID) != ofA {
		t.Error("two readers of one session got two channels")
	}
	if _, err := st.AppendEvent(ctx, a.ID, "test", map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if !closed(ofA) || !closed(ofAll) {
		t.Errorf("after a commit of a: a's channel closed %v, every session's %v; want both", closed(ofA), closed(ofAll))
	}
	if closed(ofB) {
		t.Error("a commit of session a woke a reader of session b")
	}
	if closed(st.Watch(a.ID)) {
		t.Error("a channel asked for after the commit is closed already")
	}
	// A commit that journals nothing wakes no one.
	if err := st.Update(ctx, func(*Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if closed(ofB) || closed(st.Watch(0)) {
		t.Error("an empty commit woke a reader")
	}
	if _, err := st.AppendEvent(ctx, b.ID, "test", map[string]any{"n": 2}); err != nil {
		t.Fatal(err)
	}
	if !closed(ofB) {
		t.Error("a commit of session b did not wake b's reader")
	}
}

// An answer recorded through the backlog wakes its session's readers when it is folded.
func TestWatchWakesAtAFold(t *testing.T) {
	ctx := context.Background()
	st, sess := openSession(t, t.TempDir())
	ch := st.Watch(sess.ID)
	req := Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r-1", Method: "inspect", Body: []byte(`{}`)}
	if err := st.RecordAnswered(ctx, req, Reply{Kind: "ok", Value: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.Update(ctx, func(*Tx) error { return nil }); err != nil { // folds it
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Error("folding an answered request did not wake its session's reader")
	}
}

// A session's journal is read through its index, not by a scan of every session's.
func TestLogReadsASessionThroughItsIndex(t *testing.T) {
	st, _ := openSession(t, t.TempDir())
	rows, err := sqliteOf(st).reads.Query("EXPLAIN QUERY PLAN "+sqliteDialect.JournalOfSession, 1, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	joined := strings.Join(plan, "; ")
	if !strings.Contains(joined, "journal_by_session (session_id=? AND seq>?)") {
		t.Errorf("plan %q; want a search of journal_by_session by session and seq", joined)
	}
}

// Many readers at once share at most MaxReadConns connections.
func TestReadsShareBoundedConnections(t *testing.T) {
	ctx := context.Background()
	st, sess := openSession(t, t.TempDir())
	if _, err := st.AppendEvent(ctx, sess.ID, "test", map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4*MaxReadConns)
	for range cap(errs) {
		go func() {
			_, err := st.Log(ctx, LogFilter{Session: sess.ID})
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if stats := sqliteOf(st).reads.Stats(); stats.MaxOpenConnections != MaxReadConns || stats.OpenConnections > MaxReadConns {
		t.Errorf("read connections: %d open, at most %d; want at most %d", stats.OpenConnections, stats.MaxOpenConnections, MaxReadConns)
	}
}
