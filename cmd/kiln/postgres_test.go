package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// TestDaemonOnPostgresKilledMidCellIsRecordedHonestly: kill -9 of a daemon whose record
// is a PostgreSQL database, mid-cell; the next daemon on the database closes the cell as
// the host's, and the record is the database's, not a file of the data directory.
func TestDaemonOnPostgresKilledMidCellIsRecordedHonestly(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "killed")
	killedMidCell(t, "--store", url)
	st, err := postgres.OpenStore(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.SessionByName(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, cell := range []string{"c-1", "c-2", "c-3"} {
		if _, err := st.ExecutionByCell(t.Context(), sess.ID, cell); err != nil {
			t.Errorf("cell %s in the database: %v", cell, err)
		}
	}

	if err := st.Check(t.Context()); err != nil {
		t.Error(err)
	}
}

// TestDaemonStoreFromKilnToml: kiln.toml's store is the daemon's record; one whose URL
// carries a password is refused, naming the file and the key, and so is --store.
func TestDaemonStoreFromKilnToml(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t, "toml")
	dir := shortTemp(t)
	writeFile(t, filepath.Join(dir, "kiln.toml"), "store = \""+url+"\"\n")
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"t"}`, 201, nil)
	s.call("POST", "/v1/sessions/t/executions", `{"code":"1 + 1"}`, 200, nil)
	st, err := postgres.OpenStore(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.SessionByName(t.Context(), "t"); err != nil {
		t.Errorf("session t in kiln.toml's store: %v", err)
	}

	withPassword := strings.Replace(url, "postgres@", "postgres:secret@", 1)
	bad := shortTemp(t)
	writeFile(t, filepath.Join(bad, "kiln.toml"), "store = \""+withPassword+"\"\n")
	var out, errs strings.Builder
	code := run(t.Context(), []string{"serve", "--data", bad}, strings.NewReader(""), &out, &errs)
	if code == 0 || !strings.Contains(errs.String(), "kiln.toml:1: store: the URL carries a password") || strings.Contains(errs.String(), "secret") {
		t.Errorf("kiln.toml with a password: exit %d, %q", code, errs.String())
	}
	errs.Reset()
	code = run(t.Context(), []string{"serve", "--data", shortTemp(t), "--store", withPassword}, strings.NewReader(""), &out, &errs)
	if code == 0 || !strings.Contains(errs.String(), "PGPASSWORD") || strings.Contains(errs.String(), "secret") {
		t.Errorf("--store with a password: exit %d, %q", code, errs.String())
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
