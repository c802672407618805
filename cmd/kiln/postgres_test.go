package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// TestDaemonStoreFromKilnToml: kiln.toml's store is the daemon's record; one whose URL
// carries a password is refused, naming the file and the key, and so is --store.
func TestDaemonStoreFromKilnToml(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	url := srv.Database(t, "toml")
	dir := clitest.ShortTemp(t)
	clitest.WriteFile(t, filepath.Join(dir, "kiln.toml"), "store = \""+url+"\"\n")
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"t"}`, 201, nil)
	s.Call("POST", "/v1/sessions/t/executions", `{"code":"1 + 1"}`, 200, nil)
	st, err := postgres.OpenStore(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.SessionByName(t.Context(), "t"); err != nil {
		t.Errorf("session t in kiln.toml's store: %v", err)
	}
	// Another daemon, of another data directory, shares the database and reads the
	// session the first holds; one of the same data directory is refused.
	other := clitest.StartServe(t, clitest.ShortTemp(t), "--store", url)
	var view struct {
		HeldBy string `json:"held_by"`
	}
	other.Call("GET", "/v1/sessions/t", "", 200, &view)
	if !strings.Contains(view.HeldBy, "pid "+strconv.Itoa(s.Cmd.Process.Pid)) {
		t.Errorf("session t read on a second daemon on the database: %+v; want it held by the first", view)
	}
	var out, errs strings.Builder
	code := run(t.Context(), []string{"serve", "--data", dir}, strings.NewReader(""), &out, &errs)
	if code == 0 || !strings.Contains(errs.String(), "held by another daemon") || !strings.Contains(errs.String(), "pid "+strconv.Itoa(s.Cmd.Process.Pid)) {
		t.Errorf("a second daemon on the data directory: exit %d, %q", code, errs.String())
	}

	withPassword := strings.Replace(url, "postgres@", "postgres:secret@", 1)
	bad := clitest.ShortTemp(t)
	clitest.WriteFile(t, filepath.Join(bad, "kiln.toml"), "store = \""+withPassword+"\"\n")
	errs.Reset()
	code = run(t.Context(), []string{"serve", "--data", bad}, strings.NewReader(""), &out, &errs)
	if code == 0 || !strings.Contains(errs.String(), "kiln.toml:1: store: the URL carries a password") || strings.Contains(errs.String(), "secret") {
		t.Errorf("kiln.toml with a password: exit %d, %q", code, errs.String())
	}
	errs.Reset()
	code = run(t.Context(), []string{"serve", "--data", clitest.ShortTemp(t), "--store", withPassword}, strings.NewReader(""), &out, &errs)
	if code == 0 || !strings.Contains(errs.String(), "PGPASSWORD") || strings.Contains(errs.String(), "secret") {
		t.Errorf("--store with a password: exit %d, %q", code, errs.String())
	}
}

// TestStoreMigrateAndCheck: kiln store migrate brings a record to this kiln's schema
// and says from which version; kiln store check reads it, its leases with the daemon's
// among them, and its last entry; a record of a newer schema is refused by migrate,
// check and serve alike, saying so — on SQLite and on PostgreSQL.
func TestStoreMigrateAndCheck(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dir := clitest.ShortTemp(t)
			args, driver, dsn := []string{"--data", dir}, "sqlite", filepath.Join(dir, store.FileName)
			if engine == "postgres" {
				url := srv.Database(t, "migrate")
				args, driver, dsn = append(args, "--store", url), "pgx", url
			}
			if out := clitest.Out(t, append([]string{"store", "migrate"}, args...)...); !strings.Contains(out, "migrated from schema version 0 to ") {
				t.Errorf("the first migrate: %q", out)
			}
			if out := clitest.Out(t, append([]string{"store", "migrate"}, args...)...); !strings.Contains(out, "is at schema version") {
				t.Errorf("migrate again: %q", out)
			}
			s := clitest.StartServe(t, dir, args[2:]...)
			s.Call("POST", "/v1/sessions", `{"id":"m"}`, 201, nil)
			out := clitest.Out(t, append([]string{"store", "check"}, args...)...)
			daemonLease := "daemon:serve  pid " // on a shared record, one lease per host and data directory
			if engine == "postgres" {
				host, _ := os.Hostname()
				daemonLease = "daemon:serve:" + host + ":" + dir + "  pid "
			}
			for _, want := range []string{"integrity: ok", daemonLease + strconv.Itoa(s.Cmd.Process.Pid), "(live)", "journal: last entry "} {
				if !strings.Contains(out, want) {
					t.Errorf("check: %q; want %q in it", out, want)
				}
			}
			s.Cmd.Process.Signal(syscall.SIGTERM)
			<-s.Exited

			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`UPDATE schema_version SET version = 999`); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range [][]string{{"store", "migrate"}, {"store", "check"}, {"serve", "--sandbox", "none"}} {
				var stdout, stderr strings.Builder
				code := run(t.Context(), append(cmd, args...), strings.NewReader(""), &stdout, &stderr)
				if code != exitFail || !strings.Contains(stderr.String(), "version 999, this kiln knows") {
					t.Errorf("kiln %s on a newer schema: exit %d, %q", strings.Join(cmd, " "), code, stderr.String())
				}
			}
		})
	}
}

// TestLeaseTTLFlagIsBounded: --lease-ttl is refused on the SQLite record, where a lease
// lasts while its daemon lives, and out of 1s..10m on a shared one, before the daemon
// opens anything.
func TestLeaseTTLFlagIsBounded(t *testing.T) {
	shared := "postgres://kiln@/kiln?host=/nonexistent"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease-ttl", "5s"}, "applies to a record daemons share"},
		{[]string{"--store", shared, "--lease-ttl", "999ms"}, "must be 1s..10m0s, got 999ms"},
		{[]string{"--store", shared, "--lease-ttl", "10m1ms"}, "must be 1s..10m0s, got 10m0.001s"},
	} {
		var out, errs strings.Builder
		code := run(t.Context(), append([]string{"serve", "--data", clitest.ShortTemp(t)}, c.args...), strings.NewReader(""), &out, &errs)
		if code == 0 || !strings.Contains(errs.String(), c.want) {
			t.Errorf("kiln serve %q: exit %d, %q; want %q", c.args, code, errs.String(), c.want)
		}
	}
}
