package pgtest_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

// TestServerServesADatabaseAKeyNames: a started cluster serves a database on its
// socket, the same key names the same database, and another key another.
func TestServerServesADatabaseAKeyNames(t *testing.T) {
	srv := pgtest.Start(t)
	a := srv.Database(t, "a")
	if again := srv.Database(t, "a"); again != a {
		t.Errorf("key a again: %s; want %s", again, a)
	}
	if b := srv.Database(t, "b"); b == a {
		t.Errorf("key b names key a's database %s", a)
	}
	db, err := sql.Open("pgx", a)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (v BIGINT)`); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.QueryRow(`SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil || v < 100000 {
		t.Errorf("server version %d, %v", v, err)
	}
	if socks, _ := filepath.Glob(filepath.Join(os.TempDir(), "kiln-pg*", ".s.PGSQL.*")); len(socks) == 0 {
		if socks, _ = filepath.Glob("/tmp/kiln-pg*/.s.PGSQL.*"); len(socks) == 0 {
			t.Error("no socket of the cluster")
		}
	}
}
