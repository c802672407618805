// Package storetest is the conformance suite of the store's engines: what a Store must
// do whatever database it runs on. Every engine runs it, from a test of its own:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t testing.TB, dir string) (*store.Store, error) {
//			return store.New(t.Context(), myengine.Open(dir), store.Options{})
//		})
//	}
//
// It checks the record (what is written reads back, in commit order), all or nothing
// (a failed transaction leaves no trace), durability across a reopen, leases (one
// holder at a time), change notification (a commit wakes its own session's readers,
// not another's), cancellation (a write waiting for the lock ends with its context),
// and ordering under concurrent writers.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/store"
)

// Opener opens the record kept for dir: opening the same dir again, once the Store
// before is closed, is the same record. dir is a fresh temporary directory per test.
type Opener func(t testing.TB, dir string) (*store.Store, error)

// waitBound is how long a check waits for what must happen at once, on a loaded machine.
const waitBound = 10 * time.Second

// Run runs the suite against the engine open opens.
func Run(t *testing.T, open Opener) {
	t.Helper()
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"RecordReadsBackInCommitOrder", recordReadsBack},
		{"FailedTransactionLeavesNothing", failedLeavesNothing},
		{"RecordOutlivesItsStore", recordOutlives},
		{"LeaseHasOneHolder", leaseOneHolder},
		{"CommitWakesItsOwnSession", commitWakesOwnSession},
		{"WaitForTheWriteLockEndsWithContext", writeWaitEndsWithContext},
		{"ConcurrentWritersKeepOneOrder", concurrentOrder},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// opened is open's Store for a fresh directory, closed when the test ends.
func opened(t *testing.T, open Opener) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := open(t, dir)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// session is a new session of s named name.
func session(t *testing.T, s *store.Store, name string) store.Session {
	t.Helper()
	sess, _, err := s.EnsureSession(t.Context(), name)
	if err != nil {
		t.Fatalf("session %s: %v", name, err)
	}
	return sess
}

// events are the texts of the operator inputs of session's journal, in its order, and
// the journal's sequence numbers, which must rise.
func events(t *testing.T, s *store.Store, session int64) []string {
	t.Helper()
	entries, err := s.Log(t.Context(), store.LogFilter{Session: session})
	if err != nil {
		t.Fatalf("log: %v", err)
	}
	var texts []string
	var last int64
	for _, e := range entries {
		if e.Seq <= last {
			t.Fatalf("journal sequence %d after %d", e.Seq, last)
		}
		last = e.Seq
		if ev, ok := e.Record.(store.Event); ok {
			texts = append(texts, string(ev.Payload))
		}
	}
	return texts
}

// input appends the operator input text to session.
func input(t testing.TB, s *store.Store, session int64, text string) {
	t.Helper()
	if _, err := s.AppendEvent(context.Background(), session, store.SourceOperator, text); err != nil {
		t.Fatalf("append %s: %v", text, err)
	}
}

func recordReadsBack(t *testing.T, open Opener) {
	s, _ := opened(t, open)
	a, b := session(t, s, "a"), session(t, s, "b")
	input(t, s, a.ID, "one")
	input(t, s, b.ID, "two")
	input(t, s, a.ID, "three")
	if got, want := events(t, s, a.ID), []string{`"one"`, `"three"`}; !slices.Equal(got, want) {
		t.Errorf("session a's inputs %v; want %v", got, want)
	}
	all, err := s.Log(t.Context(), store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.LastSeq(t.Context(), a.ID)
	if err != nil || len(all) == 0 || last > all[len(all)-1].Seq {
		t.Errorf("session a's last seq %d, %v; the journal ends at %v", last, err, all)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Error(err)
	}
}

func failedLeavesNothing(t *testing.T, open Opener) {
	s, _ := opened(t, open)
	a := session(t, s, "a")
	before, err := s.Log(t.Context(), store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	err = s.Update(t.Context(), func(tx *store.Tx) error {
		if _, err := tx.AppendEvent(a.ID, store.SourceOperator, "half"); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("the failed transaction: %v; want its own error", err)
	}
	after, err := s.Log(t.Context(), store.LogFilter{})
	if err != nil || len(after) != len(before) {
		t.Errorf("the journal after a failed transaction: %d entries, %v; want %d", len(after), err, len(before))
	}
	input(t, s, a.ID, "after") // the engine goes on
	if got := events(t, s, a.ID); !slices.Equal(got, []string{`"after"`}) {
		t.Errorf("session a's inputs after a failed transaction: %v; want only the one after it", got)
	}
}

func recordOutlives(t *testing.T, open Opener) {
	dir := t.TempDir()
	s, err := open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	a := session(t, s, "a")
	input(t, s, a.ID, "kept")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = open(t, dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	again, err := s.SessionByName(t.Context(), "a")
	if err != nil || again.ID != a.ID {
		t.Fatalf("session a after reopening: %+v, %v; want id %d", again, err, a.ID)
	}
	if got := events(t, s, a.ID); !slices.Equal(got, []string{`"kept"`}) {
		t.Errorf("after reopening: %v", got)
	}
	if err := s.Check(t.Context()); err != nil {
		t.Error(err)
	}
}

func leaseOneHolder(t *testing.T, open Opener) {
	s, _ := opened(t, open)
	ctx := t.Context()
	l, err := s.AcquireLease(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "k"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Errorf("a second holder: %v; want ErrLeaseHeld", err)
	}
	if _, live, err := s.LeaseHolder(ctx, "k"); err != nil || !live {
		t.Errorf("the holder: live %v, %v; want live", live, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LeaseHolder(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after release: %v; want ErrNotFound", err)
	}
	again, err := s.AcquireLease(ctx, "k")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Release(ctx)
}

func commitWakesOwnSession(t *testing.T, open Opener) {
	s, _ := opened(t, open)
	a, b := session(t, s, "a"), session(t, s, "b")
	woken, other, any := s.Watch(a.ID), s.Watch(b.ID), s.Watch(0)
	input(t, s, a.ID, "wake")
	for name, ch := range map[string]<-chan struct{}{"session a's": woken, "every session's": any} {
		select {
		case <-ch:
		case <-time.After(waitBound):
			t.Errorf("%s reader was not woken by a commit to session a", name)
		}
	}
	select {
	case <-other:
		t.Error("session b's reader was woken by a commit to session a")
	default:
	}
}

func writeWaitEndsWithContext(t *testing.T, open Opener) {
	s, _ := opened(t, open)
	a := session(t, s, "a")
	holding, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.Update(context.Background(), func(*store.Tx) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() {
		_, err := s.AppendEvent(ctx, a.ID, store.SourceOperator, "late")
		waited <- err
	}()
	cancel()
	select {
	case err := <-waited:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a write cancelled while it waits: %v; want context.Canceled", err)
		}
	case <-time.After(waitBound):
		t.Error("a write cancelled while it waits for the lock did not return")
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if got := events(t, s, a.ID); len(got) != 0 {
		t.Errorf("the cancelled write was recorded: %v", got)
	}
}

func concurrentOrder(t *testing.T, open Opener) {
	s, _ := opened(t, open)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	ids := make([]int64, writers)
	for w := range writers {
		ids[w] = session(t, s, fmt.Sprintf("w%d", w)).ID
	}
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				input(t, s, ids[w], fmt.Sprint(i))
			}
		})
	}
	wg.Wait()
	for w := range writers {
		got := events(t, s, ids[w])
		if len(got) != each {
			t.Fatalf("writer %d: %d inputs; want %d", w, len(got), each)
		}
		for i, text := range got {
			if text != `"`+fmt.Sprint(i)+`"` {
				t.Fatalf("writer %d's inputs out of order: %v", w, got)
			}
		}
	}
}
