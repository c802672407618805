// Package storetest is the conformance suite of the store's engines: what a Store must
// do whatever database it runs on. Every engine runs it, from a test of its own:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t testing.TB, dir string, opts store.Options) (*store.Store, error) {
//			return store.New(t.Context(), myengine.Open(dir), opts)
//		})
//	}
//
// It checks the record (what is written reads back, in commit order), all or nothing
// (a failed transaction leaves no trace), durability across a reopen, leases (one
// holder at a time; under a TTL, one that ends unrenewed is taken over, and its
// Store learns it lost it), the daemon's sessions, change notification (a commit wakes its own session's readers,
// not another's), cancellation (a write waiting for the lock ends with its context),
// and ordering under concurrent writers: a reader that follows the journal by sequence
// number, as an event stream resumes, sees every entry of Stores writing at once.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/store"
)

// Opener opens the record kept for dir, with opts: opening the same dir again, once the
// Store before is closed — or while it is open, for a second Store on one record — is
// the same record. dir is a fresh temporary directory per test.
type Opener func(t testing.TB, dir string, opts store.Options) (*store.Store, error)

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
		{"LeaseEndsUnrenewed", leaseEndsUnrenewed},
		{"LeaseWithoutATermLastsWhileItsProcessLives", leaseWithoutTerm},
		{"EndedLeasesAreClaimedOnce", endedLeasesClaimedOnce},
		{"DaemonSessionsReadBack", daemonSessionsReadBack},
		{"CommitWakesItsOwnSession", commitWakesOwnSession},
		{"WaitForTheWriteLockEndsWithContext", writeWaitEndsWithContext},
		{"ConcurrentWritersKeepOneOrder", concurrentOrder},
		{"AFollowerOfTheJournalMissesNothing", followerMissesNothing},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// opened is open's Store for a fresh directory, closed when the test ends.
func opened(t *testing.T, open Opener) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := open(t, dir, store.Options{})
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
	s, err := open(t, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := session(t, s, "a")
	input(t, s, a.ID, "kept")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = open(t, dir, store.Options{})
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

// clock is a store's clock that moves only when told to. It starts at the time of day,
// which a database server's clock agrees with as a Store opens (Dialect.Clock).
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *clock) now() time.Time               { return time.UnixMilli(c.ms.Load()) }
func (c *clock) advance(d time.Duration)      { c.ms.Add(d.Milliseconds()) }
func (c *clock) at(d time.Duration) time.Time { return c.now().Add(d) }

// leaseTTL is a term no renewal of the suite's comes within: its clock moves alone.
const leaseTTL = time.Hour

func leaseEndsUnrenewed(t *testing.T, open Opener) {
	ctx := t.Context()
	dir, c := t.TempDir(), newClock()
	var lost []string
	var lostMu sync.Mutex
	opts := store.Options{Now: c.now, Lease: store.LeaseTerms{TTL: leaseTTL, URL: "http://a.example",
		Lost: func(key string) { lostMu.Lock(); lost = append(lost, key); lostMu.Unlock() }}}
	a, err := open(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// b opens before the clock moves: a Store of a shared server checks that its clock
	// agrees with the server's as it opens.
	bOpts := opts
	bOpts.Lease.URL, bOpts.Lease.Lost = "http://b.example", nil
	b, err := open(t, dir, bOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := a.AcquireLease(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	h, live, err := a.LeaseHolder(ctx, "k")
	if err != nil || !live || h.URL != "http://a.example" || !h.ExpiresAt.Equal(c.at(leaseTTL)) {
		t.Fatalf("the holder: %+v live %v, %v; want live at http://a.example until %v", h, live, err, c.at(leaseTTL))
	}
	c.advance(leaseTTL / 2)
	if gone, err := a.RenewLeases(ctx); err != nil || len(gone) != 0 {
		t.Fatalf("a renewal in time: lost %v, %v; want none", gone, err)
	}
	c.advance(leaseTTL - time.Millisecond) // one before the renewed term ends
	if _, err := a.AcquireLease(ctx, "k"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("within the renewed term: %v; want ErrLeaseHeld", err)
	}
	c.advance(time.Millisecond) // at its end
	if _, live, err := a.LeaseHolder(ctx, "k"); err != nil || live {
		t.Fatalf("at the end of its term: live %v, %v; want ended", live, err)
	}
	taken, err := b.AcquireLease(ctx, "k")
	if err != nil || taken.TookOver == nil || taken.TookOver.URL != "http://a.example" {
		t.Fatalf("an ended lease: %+v, %v; want taken over from http://a.example", taken, err)
	}
	gone, err := a.RenewLeases(ctx)
	lostMu.Lock()
	told := slices.Clone(lost)
	lostMu.Unlock()
	if err != nil || !slices.Equal(gone, []string{"k"}) || !slices.Equal(told, []string{"k"}) {
		t.Fatalf("the first holder's renewal: lost %v (told %v), %v; want k", gone, told, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h, live, err := b.LeaseHolder(ctx, "k"); err != nil || !live || h.URL != "http://b.example" {
		t.Fatalf("after the first holder's release: %+v live %v, %v; want the second holder's", h, live, err)
	}
	if err := b.AdvertiseURL(ctx, "http://b2.example"); err != nil {
		t.Fatal(err)
	}
	if h, _, err := b.LeaseHolder(ctx, "k"); err != nil || h.URL != "http://b2.example" {
		t.Fatalf("after advertising another URL: %+v, %v", h, err)
	}
	taken.Release(ctx)
}

// endedLeasesClaimedOnce: Stores that claim ended leases at once take each once, and
// only those of the prefix whose term ended; a Store claims none of its own.
func endedLeasesClaimedOnce(t *testing.T, open Opener) {
	ctx, dir, c := t.Context(), t.TempDir(), newClock()
	opts := store.Options{Now: c.now, Lease: store.LeaseTerms{TTL: leaseTTL, URL: "http://a.example"}}
	a, err := open(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	keys := []string{"session:x", "session:y", "session:z", "other"}
	for _, key := range keys {
		if _, err := a.AcquireLease(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.ClaimEnded(ctx, "session:"); err != nil || len(got) != 0 {
		t.Fatalf("live leases claimed: %v, %v", got, err)
	}
	opts.Lease.URL = "http://b.example"
	claimers := make([]*store.Store, 2)
	for i := range claimers { // before the clock moves, as in leaseEndsUnrenewed
		if claimers[i], err = open(t, dir, opts); err != nil {
			t.Fatal(err)
		}
		defer claimers[i].Close()
	}
	c.advance(leaseTTL)
	if got, err := a.ClaimEnded(ctx, "session:"); err != nil || len(got) != 0 {
		t.Fatalf("a Store claimed its own leases: %v, %v", got, err)
	}
	claimed := make([][]*store.Lease, len(claimers))
	var wg sync.WaitGroup
	for i, s := range claimers {
		wg.Go(func() {
			var err error
			if claimed[i], err = s.ClaimEnded(ctx, "session:"); err != nil {
				t.Errorf("claiming: %v", err)
			}
		})
	}
	wg.Wait()
	var got []string
	for _, ls := range claimed {
		for _, l := range ls {
			if l.TookOver == nil || l.TookOver.URL != "http://a.example" {
				t.Errorf("%s taken from %+v; want a's", l.Key(), l.TookOver)
			}
			got = append(got, l.Key())
			defer l.Release(ctx)
		}
	}
	slices.Sort(got)
	if want := keys[:3]; !slices.Equal(got, want) {
		t.Errorf("claimed %v; want each of %v once", got, want)
	}
	for _, key := range keys[:3] {
		if h, live, err := a.LeaseHolder(ctx, key); err != nil || !live || h.URL != "http://b.example" {
			t.Errorf("%s after the claims: %+v live %v, %v; want held by a claimer", key, h, live, err)
		}
	}
}

func leaseWithoutTerm(t *testing.T, open Opener) {
	ctx, c := t.Context(), newClock()
	s, err := open(t, t.TempDir(), store.Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.AcquireLease(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	c.advance(1000 * time.Hour)
	if h, live, err := s.LeaseHolder(ctx, "k"); err != nil || !live || !h.ExpiresAt.IsZero() {
		t.Fatalf("a lease with no term, long after: %+v live %v, %v; want live, with no end", h, live, err)
	}
	if gone, err := s.RenewLeases(ctx); err != nil || len(gone) != 0 {
		t.Fatalf("renewing without a term: %v, %v; want nothing", gone, err)
	}
}

func daemonSessionsReadBack(t *testing.T, open Opener) {
	s, _ := opened(t, open)
	ctx := t.Context()
	if _, err := s.DaemonSessionState(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a session never saved: %v; want ErrNotFound", err)
	}
	for _, st := range []string{`{"state":"open"}`, `{"state":"stopped"}`} {
		if err := s.SaveDaemonSession(ctx, "a", []byte(st)); err != nil {
			t.Fatal(err)
		}
		if got, err := s.DaemonSessionState(ctx, "a"); err != nil || string(got) != st {
			t.Fatalf("read back %q, %v; want %q", got, err, st)
		}
	}
	if err := s.SaveDaemonSession(ctx, "b", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	all, err := s.DaemonSessions(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "a" || all[1].Name != "b" {
		t.Fatalf("every session: %+v, %v; want a and b", all, err)
	}
	if err := s.RemoveDaemonSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DaemonSessionState(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after removal: %v; want ErrNotFound", err)
	}
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
		wg.Go(func() { // off the test's goroutine: an error is reported, and ends the writer
			for i := range each {
				if _, err := s.AppendEvent(context.Background(), ids[w], store.SourceOperator, fmt.Sprint(i)); err != nil {
					t.Errorf("writer %d, append %d: %v", w, i, err)
					return
				}
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

// followerMissesNothing: Stores on one record write to sessions of their own at once,
// while a reader follows the whole journal from its last sequence number, as an event
// stream does; the reader sees every entry, once, in the journal's order. (Were the
// numbers handed out in another order than commits, it would pass over one committed
// after a higher one it had seen.)
func followerMissesNothing(t *testing.T, open Opener) {
	first, dir := opened(t, open)
	second, err := open(t, dir, store.Options{})
	if err != nil {
		t.Fatalf("a second Store: %v", err)
	}
	defer second.Close()
	const writers, each = 4, 40
	ids := make([]int64, writers)
	for w := range writers {
		ids[w] = session(t, first, fmt.Sprintf("w%d", w)).ID
	}
	var seen []int64
	follow := func() {
		since := int64(0)
		if len(seen) > 0 {
			since = seen[len(seen)-1]
		}
		entries, err := first.Log(t.Context(), store.LogFilter{Since: since})
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
		for _, e := range entries {
			seen = append(seen, e.Seq)
		}
	}
	follow()
	start := len(seen)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		s := []*store.Store{first, second}[w%2]
		wg.Go(func() {
			for i := range each {
				input(t, s, ids[w], fmt.Sprint(i))
			}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	for following := true; following; {
		select {
		case <-done:
			following = false
		default:
		}
		follow()
	}
	all, err := first.Log(t.Context(), store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, len(all))
	for i, e := range all {
		want[i] = e.Seq
	}
	if got := seen; !slices.Equal(got, want) {
		t.Errorf("the follower saw %d entries, %d of them during the writes; the journal has %d: missed %v",
			len(got), len(got)-start, len(want), missing(want, got))
	}
}

// missing are the numbers of want not in got.
func missing(want, got []int64) []int64 {
	var out []int64
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}
