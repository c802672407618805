package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
	"github.com/kilnrt/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

// TestConformance runs the engines' suite against PostgreSQL: a database per directory
// the suite names.
func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, func(t testing.TB, dir string, opts store.Options) (*store.Store, error) {
		return postgres.OpenStore(t.Context(), srv.Database(t, dir), opts)
	})
	t.Run("AnotherStoresCommitWakesItsReaders", func(t *testing.T) { anotherStoresCommitWakes(t, srv) })
	t.Run("AnIdleTransactionEnds", func(t *testing.T) { idleTransactionEnds(t, srv) })
}

// idleTransactionEnds: the engine's connections have the server end a transaction left
// idle past IdleInTransactionTimeout, unless the URL sets another term.
func idleTransactionEnds(t *testing.T, srv *pgtest.Server) {
	url := srv.Database(t, t.Name())
	for _, c := range []struct{ url, want string }{{url, "30s"}, {url + "&idle_in_transaction_session_timeout=5000", "5s"}} {
		e, err := postgres.Open(t.Context(), c.url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = e.WriterRow(t.Context(), `SHOW idle_in_transaction_session_timeout`).Scan(&got)
		e.Close()
		if err != nil || got != c.want {
			t.Errorf("%s: idle_in_transaction_session_timeout %q, %v; want %s", c.url, got, err, c.want)
		}
	}
}

// anotherStoresCommitWakes: a commit of one Store wakes the readers of another on the
// same database, by its notification; a change no notification tells of (a row written
// by hand) wakes them too, by the poll, within a bound.
func anotherStoresCommitWakes(t *testing.T, srv *pgtest.Server) {
	url := srv.Database(t, t.Name())
	var stores [2]*store.Store
	for i := range stores {
		st, err := postgres.OpenStore(t.Context(), url, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	a, b := stores[0], stores[1]
	sess, _, err := a.EnsureSession(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	woken, any := b.Watch(sess.ID), b.Watch(0)
	if _, err := a.AppendEvent(t.Context(), sess.ID, store.SourceOperator, "hello"); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan struct{}{"the session's": woken, "every session's": any} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s reader of another Store was not woken by a commit", name)
		}
	}
	any = b.Watch(0)
	exec(t, url, fmt.Sprintf(`INSERT INTO journal (session_id, at_ms, kind, ref_id) VALUES (%d, 0, 'by_hand', 0)`, sess.ID))
	select {
	case <-any:
	case <-time.After(30 * postgres.PollInterval):
		t.Fatal("a change no notification told of did not wake a reader")
	}
}

// TestANewerSchemaIsRefused: a database a newer kiln migrated is refused as it opens,
// saying so, and left as it is.
func TestANewerSchemaIsRefused(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "newer")
	st, err := postgres.OpenStore(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	exec(t, url, `UPDATE schema_version SET version = 999`)
	_, err = postgres.OpenStore(t.Context(), url, store.Options{})
	if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), "version 999") {
		t.Fatalf("a newer schema: %v; want ErrSchemaTooNew naming its version", err)
	}
}

// TestCheckFindsWhatTheServerLeftUnvalidated: a constraint added NOT VALID is reported
// by Check, which passes a sound database.
func TestCheckFindsWhatTheServerLeftUnvalidated(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "check")
	st, err := postgres.OpenStore(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("a sound database: %v", err)
	}
	exec(t, url, `ALTER TABLE sessions ADD CONSTRAINT positive CHECK (id > 0) NOT VALID`)
	if err := st.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "sessions.positive") {
		t.Errorf("an unvalidated constraint: %v; want it named", err)
	}
}

// TestAURLWithAPasswordIsRefused: the password comes from the environment, never the
// URL; a message shows a URL without its password.
func TestAURLWithAPasswordIsRefused(t *testing.T) {
	for _, u := range []string{"postgres://kiln:secret@db/kiln", "postgresql://kiln@db/kiln?password=secret"} {
		if err := postgres.CheckURL(u); !errors.Is(err, postgres.ErrPasswordInURL) {
			t.Errorf("%s: %v; want ErrPasswordInURL", u, err)
		}
		if r := postgres.Redact(u); strings.Contains(r, "secret") {
			t.Errorf("redacted %s: %s", u, r)
		}
		if _, err := postgres.OpenStore(t.Context(), u, store.Options{}); !errors.Is(err, postgres.ErrPasswordInURL) {
			t.Errorf("opening %s: %v", u, err)
		}
	}
	if err := postgres.CheckURL("/var/lib/kiln"); err == nil {
		t.Error("a directory taken for a URL")
	}
	if err := postgres.CheckURL("postgres://kiln@db/kiln?sslmode=require"); err != nil {
		t.Errorf("a URL without a password: %v", err)
	}
}

// exec runs statement on the database at url.
func exec(t *testing.T, url, statement string) {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), statement); err != nil {
		t.Fatal(err)
	}
}

// TestAClaimSkipsALeaseAnotherIsTaking: a Store looking for ended leases passes over
// one whose row another transaction holds, rather than wait for it, and takes it at
// its next look once the row is free.
func TestAClaimSkipsALeaseAnotherIsTaking(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "claim")
	opts := store.Options{Lease: store.LeaseTerms{TTL: time.Second}}
	a, err := postgres.OpenStore(t.Context(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"session:held", "session:free"} {
		if _, err := a.AcquireLease(t.Context(), key); err != nil {
			t.Fatal(err)
		}
	}
	a.Close() // its leases end unrenewed a second after they were taken
	// b's clock moves once b is open: it opens on a clock the server agrees with.
	var ahead atomic.Int64
	opts.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	b, err := postgres.OpenStore(t.Context(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ahead.Store(int64(2 * time.Second))
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	if _, err := other.ExecContext(t.Context(), `SELECT 1 FROM leases WHERE key = 'session:held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	claimed, err := b.ClaimEnded(ctx, "session:")
	if err != nil || len(claimed) != 1 || claimed[0].Key() != "session:free" {
		t.Fatalf("claimed %v, %v; want session:free alone, at once", claimed, err)
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	claimed, err = b.ClaimEnded(ctx, "session:")
	if err != nil || len(claimed) != 1 || claimed[0].Key() != "session:held" {
		t.Fatalf("once the row is free: %v, %v; want session:held", claimed, err)
	}
}

// TestAClaimLeavesALeaseRenewedSinceItsRead: a Store that read a lease as ended does
// not take it if its holder renewed it before the claim: the claim requires the term it
// read, not the holder's token alone, so that no session has two holders.
func TestAClaimLeavesALeaseRenewedSinceItsRead(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	url := srv.Database(t, "renewed")
	var at atomic.Int64
	at.Store(time.Now().UnixMilli())
	clock := func() time.Time { return time.UnixMilli(at.Load()) }
	a, err := postgres.OpenStore(t.Context(), url, store.Options{Now: clock, Lease: store.LeaseTerms{TTL: time.Hour, URL: "http://a.example"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.AcquireLease(t.Context(), "session:x"); err != nil {
		t.Fatal(err)
	}
	var afterRead atomic.Pointer[func()]
	b, err := postgres.OpenStore(t.Context(), url, store.Options{
		Now: func() time.Time {
			if f := afterRead.Swap(nil); f != nil {
				(*f)()
			}
			return clock()
		},
		Lease: store.LeaseTerms{TTL: time.Hour, URL: "http://b.example"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	at.Add(time.Hour.Milliseconds()) // the term ends unrenewed
	// renew runs between b's read of the ended lease and its claim.
	renew := func() {
		if lost, err := a.RenewLeases(t.Context()); err != nil || len(lost) != 0 {
			t.Errorf("the holder's renewal: lost %v, %v", lost, err)
		}
	}
	afterRead.Store(&renew)
	claimed, err := b.ClaimEnded(t.Context(), "session:")
	if afterRead.Load() != nil {
		t.Fatal("the claim read no clock after its read")
	}
	for _, l := range claimed {
		defer l.Release(t.Context())
	}
	if err != nil || len(claimed) != 0 {
		t.Errorf("claimed %v, %v; want none: the holder renewed", claimed, err)
	}
	if h, live, err := b.LeaseHolder(t.Context(), "session:x"); err != nil || !live || h.URL != "http://a.example" {
		t.Errorf("the holder after the claim: %+v live %v, %v; want the renewing holder", h, live, err)
	}
}

// TestAnsweredAndRecordedRequestsTakeDistinctIDs: answered requests, which the store
// records in a transaction of its own on an engine with no side log, and a request
// recorded the ordinary way after them take ids in order, none twice.
func TestAnsweredAndRecordedRequestsTakeDistinctIDs(t *testing.T) {
	srv := pgtest.Start(t)
	st, err := postgres.OpenStore(t.Context(), srv.Database(t, "ids"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, _, err := st.EnsureSession(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		req := store.Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r-" + string(rune('a'+i)),
			Method: "runtime.inspect", Body: []byte(`{"method":"runtime.inspect"}`)}
		if err := st.RecordAnswered(t.Context(), req, store.Reply{Kind: "ok", Value: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	req := store.Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r-next",
		Method: "local.send", Body: []byte(`{"method":"local.send"}`)}
	if err := st.Update(t.Context(), func(tx *store.Tx) error { return tx.InsertRequest(&req) }); err != nil {
		t.Fatalf("a request after answered ones: %v", err)
	}
	if req.ID != 4 {
		t.Errorf("the request after 3 answered ones has id %d; want 4", req.ID)
	}
}

// TestWritesWaitForThoseTheyCouldClashWith: a transaction of one engine holds up
// another engine's on the same database where their scopes meet — the whole record, or
// one session — and not otherwise; a wait ends with its context. A commit of a
// transaction a failed statement aborted is refused, not taken for a commit.
func TestWritesWaitForThoseTheyCouldClashWith(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "lock")
	st, err := postgres.OpenStore(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	one, _, err := st.EnsureSession(t.Context(), "one")
	if err != nil {
		t.Fatal(err)
	}
	two, _, err := st.EnsureSession(t.Context(), "two")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	a, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s1, s2 := store.WriteSession(one.ID), store.WriteSession(two.ID)
	for _, c := range []struct {
		name        string
		held, other store.WriteScope
		waits       bool
	}{
		{"record, record", store.WriteRecord, store.WriteRecord, true},
		{"record, session", store.WriteRecord, s1, true},
		{"record, leases", store.WriteRecord, store.WriteLeases, true},
		{"session, record", s1, store.WriteRecord, true},
		{"session, the same session", s1, s1, true},
		{"session, another session", s1, s2, false},
		{"session, leases", s1, store.WriteLeases, false},
		{"leases, leases", store.WriteLeases, store.WriteLeases, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			held, err := a.Begin(t.Context(), c.held)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Rollback()
			if !c.waits {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				tx, err := b.Begin(ctx, c.other)
				if err != nil {
					t.Fatalf("a transaction that clashes with none waited: %v", err)
				}
				tx.Rollback()
				return
			}
			ctx, cancel := context.WithCancel(t.Context())
			waited := make(chan error, 1)
			go func() {
				tx, err := b.Begin(ctx, c.other)
				if err == nil {
					tx.Rollback()
				}
				waited <- err
			}()
			select {
			case err := <-waited:
				t.Fatalf("a second engine began while the first held the lock: %v", err)
			case <-time.After(100 * time.Millisecond): // it waits; the bound is not a timing claim
			}
			cancel()
			select {
			case err := <-waited:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("the wait cancelled: %v; want context.Canceled", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a wait for the lock did not end with its context")
			}
		})
	}
	for _, notify := range []bool{false, true} { // the notification goes with the COMMIT
		tx, err := b.Begin(t.Context(), store.WriteRecord)
		if err != nil {
			t.Fatalf("after the locks are free: %v", err)
		}
		if _, err := tx.Exec(`SELECT no_such_column FROM no_such_table`); err == nil {
			t.Fatal("a statement that cannot run ran")
		}
		if notify {
			if err := b.Notify(tx, []int64{one.ID}, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); !errors.Is(err, postgres.ErrCommitRolledBack) {
			t.Errorf("the commit of an aborted transaction, notifying %v: %v; want ErrCommitRolledBack", notify, err)
		}
		tx, err = b.Begin(t.Context(), store.WriteRecord)
		if err != nil {
			t.Fatalf("after an aborted transaction: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Errorf("an empty transaction: %v", err)
		}
	}
}

// TestAStoreRefusesAClockApartFromTheServers: a Store whose leases have a term opens only
// on a host whose clock agrees with the database server's within a renewal interval: a
// host whose clock ran ahead would take the leases other hosts still renew.
func TestAStoreRefusesAClockApartFromTheServers(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t).Database(t, "clock")
	const ttl = 6 * time.Second // within half a renewal interval: 1 s
	for _, c := range []struct {
		skew time.Duration
		want string // "" for a Store that opens
	}{
		// Near the bound on either side: the check allows the read's round trip beyond
		// it, a few milliseconds on a local server.
		{900 * time.Millisecond, ""},
		{-900 * time.Millisecond, ""},
		{1200 * time.Millisecond, "ahead of"},
		{-1200 * time.Millisecond, "behind"},
	} {
		st, err := postgres.OpenStore(t.Context(), url, store.Options{
			Now:   func() time.Time { return time.Now().Add(c.skew) },
			Lease: store.LeaseTerms{TTL: ttl},
		})
		if c.want == "" {
			if err != nil {
				t.Errorf("skew %v: %v; want the Store open", c.skew, err)
				continue
			}
			st.Close()
			continue
		}
		if err == nil {
			st.Close()
			t.Errorf("skew %v: the Store opened; want it refused", c.skew)
		} else if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "synchronize") {
			t.Errorf("skew %v: %v; want a refusal saying the clock is %s the server's", c.skew, err, c.want)
		}
	}
	// Without a term, a lease lasts while its holder lives: no clock to agree on.
	st, err := postgres.OpenStore(t.Context(), url, store.Options{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatalf("a Store without a term, its clock an hour ahead: %v", err)
	}
	st.Close()
}
