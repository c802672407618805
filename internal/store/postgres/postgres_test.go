package postgres_test

import (
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"

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
	storetest.Run(t, func(t testing.TB, dir string) (*store.Store, error) {
		return postgres.OpenStore(t.Context(), srv.Database(t, dir), store.Options{})
	})
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

// TestAnsweredAndRecordedRequestsTakeDistinctIDs: the store numbers answered requests
// itself, as SQLite's row ids follow the largest; a request recorded the ordinary way
// after them takes the next id, not one of theirs.
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
