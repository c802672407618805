package store

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
)

// A write waiting for the Store's write lock returns context.Canceled as soon as its
// context is cancelled, while the holder still holds it.
func TestUpdateCancelledWaitingForTheWriteLock(t *testing.T) {
	st, sess := openSession(t, t.TempDir())
	holding, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- st.Update(context.Background(), func(*Tx) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := st.AppendEvent(ctx, sess.ID, "test", map[string]any{"n": 1})
		done <- err
	}()
	cancel()
	err := <-done // the holder still holds the lock: only the cancellation can end this
	close(release)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("AppendEvent: %v; want context.Canceled", err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendEvent(context.Background(), sess.ID, "test", map[string]any{"n": 2}); err != nil {
		t.Fatalf("a write after the cancelled one: %v", err)
	}
}

// A write waiting for another process's write (here another connection's IMMEDIATE
// transaction on the same file) returns context.Canceled as soon as its context is
// cancelled, not after BusyTimeout.
func TestUpdateCancelledWaitingForAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	st, sess := openSession(t, dir)
	other, err := sql.Open("sqlite", "file:"+(&url.URL{Path: filepath.Join(dir, FileName)}).EscapedPath()+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	parent, cancel := context.WithCancel(context.Background())
	ctx := &watchedContext{Context: parent, watched: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := st.AppendEvent(ctx, sess.ID, "test", map[string]any{"n": 1})
		done <- err
	}()
	select {
	case <-ctx.watched: // the write is about to wait, watching ctx
	case err := <-done:
		t.Fatalf("AppendEvent returned without watching its context: %v", err)
	}
	cancel()
	// Ended by the cancellation, the write's error is context.Canceled; had it waited out
	// BusyTimeout, it would be SQLITE_BUSY.
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("AppendEvent: %v; want context.Canceled", err)
	}
	tx.Rollback()
	if _, err := st.AppendEvent(context.Background(), sess.ID, "test", map[string]any{"n": 2}); err != nil {
		t.Fatalf("a write after the cancelled one: %v", err)
	}
}

// Reads, and answers recorded through the backlog, refuse a context already done.
func TestCallsRefuseADoneContext(t *testing.T) {
	st, sess := openSession(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.SessionByName(ctx, sess.Name); !errors.Is(err, context.Canceled) {
		t.Errorf("SessionByName: %v; want context.Canceled", err)
	}
	if _, err := st.Log(ctx, LogFilter{Session: sess.ID}); !errors.Is(err, context.Canceled) {
		t.Errorf("Log: %v; want context.Canceled", err)
	}
	req := Request{SessionID: sess.ID, Method: "inspect", Body: []byte(`{}`)}
	if err := st.RecordAnswered(ctx, req, Reply{Kind: "ok"}); !errors.Is(err, context.Canceled) {
		t.Errorf("RecordAnswered: %v; want context.Canceled", err)
	}
}

// watchedContext closes watched the first time its Done is asked for: when a call
// begins to watch it.
type watchedContext struct {
	context.Context
	once    sync.Once
	watched chan struct{}
}

func (c *watchedContext) Done() <-chan struct{} {
	c.once.Do(func() { close(c.watched) })
	return c.Context.Done()
}
