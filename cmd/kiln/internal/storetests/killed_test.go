package storetests

import (
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// TestDaemonOnPostgresKilledMidCellIsRecordedHonestly: kill -9 of a daemon whose record
// is a PostgreSQL database, mid-cell; the next daemon on the database closes the cell as
// the host's, and the record is the database's, not a file of the data directory.
func TestDaemonOnPostgresKilledMidCellIsRecordedHonestly(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	url := srv.Database(t, "killed")
	killedMidCell(t, "--store", url)
	st, sess := recordedSession(t, url, "s")
	for _, cell := range []string{"c-1", "c-2", "c-3"} {
		if _, err := st.ExecutionByCell(t.Context(), sess.ID, cell); err != nil {
			t.Errorf("cell %s in the database: %v", cell, err)
		}
	}

	if err := st.Check(t.Context()); err != nil {
		t.Error(err)
	}
}

// recordedSession opens the record at url, closed when the test ends, and reads session
// name from it.
func recordedSession(t *testing.T, url, name string) (*store.Store, store.Session) {
	t.Helper()
	st, err := postgres.OpenStore(t.Context(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sess, err := st.SessionByName(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st, sess
}

func TestDaemonKilledMidCellIsRecordedHonestlyAfterRestart(t *testing.T) {
	t.Parallel()
	killedMidCell(t)
}

// killedMidCell kills a daemon started with args while a cell runs, and checks what the
// next daemon on the same record says of the cell and the session.
func killedMidCell(t *testing.T, args ...string) {
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir, args...)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/executions", `{"code":"x = 1"}`, 200, nil)
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/s/executions", `{"code":"import time\ntime.sleep(100)","wait_ms":0}`, 202, &rec)
	worker := clitest.WaitForChild(t, s.Cmd.Process.Pid)
	s.Kill(worker)

	s2 := clitest.StartServe(t, dir, args...)
	var list struct {
		Sessions []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"sessions"`
	}
	s2.Call("GET", "/v1/sessions", "", 200, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != "s" || list.Sessions[0].State != "open" {
		t.Fatalf("sessions after the restart: %+v", list)
	}
	var closed clitest.ExecRecord
	s2.Call("GET", "/v1/executions/"+rec.ID, "", 200, &closed)
	if closed.Status != "failed" || !closed.NamespaceLost || closed.Error == nil || !strings.Contains(*closed.Error, "host ended") {
		t.Fatalf("the cell the daemon died in: %+v", closed)
	}
	var next clitest.ExecRecord
	s2.Call("POST", "/v1/sessions/s/executions", `{"code":"'x' in dir()"}`, 200, &next)
	if !next.FreshNamespace || next.Generation == closed.Generation || len(next.Output) != 1 || next.Output[0].Text != "False" {
		t.Fatalf("the next cell: %+v", next)
	}
}
