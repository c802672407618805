package kiln_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/crashtest"
	"github.com/kilnrt/kiln/internal/pgtest"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
)

// crashDataEnv, when set, makes TestCrashChild a host that serves a stream of requests
// into that data directory until it is killed.
const crashDataEnv = "KILN_CRASH_CHILD_DATA"

// crashStoreEnv, when set, is the PostgreSQL database of TestCrashChild's record.
const crashStoreEnv = "KILN_CRASH_CHILD_STORE"

// crashKills is how many times the crash test kills the host.
const crashKills = 50

// answeredFile, in the data directory, lists the inspects whose replies the crash test's
// cells received.
const answeredFile = "answered.txt"

// endedFile, in the data directory, lists the crash test's cells whose records Execute
// returned: generation, cell id and status, a line each.
const endedFile = "ended.txt"

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDataEnv)
	if dir == "" {
		t.Skip("run by TestSIGKILLedHostsLeaveASoundRecord")
	}
	// The cells note what they were answered in the data directory, which a sandbox
	// hides from them: they run unconfined.
	wb, err := openCrashHost(t, dir, os.Getenv(crashStoreEnv))
	if err != nil {
		t.Fatal(err)
	}
	ended, err := os.OpenFile(filepath.Join(dir, endedFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("serving\n")
	for {
		// Each inspect whose reply the cell got is noted, and each cell whose record
		// Execute returned, so that the test can tell that none of them was lost.
		rec, err := wb.Execute(context.Background(), `seen = open(`+strconv.Quote(filepath.Join(dir, answeredFile))+`, "a", buffering=1)
for i in range(40):
    if i % 5 == 0:
        await runtime.request("local.send", text=f"tick {i}")
    r = await runtime.inspect()
    seen.write(f"{r['generation']} {r['execution_id']} {r['request_id']}\n")
    if i % 4 == 0:
        await runtime.workspace.run(["true"])
    if i % 10 == 0:
        await runtime.evidence.resolve(["event:1", "execution:c-1"])`)
		if err == nil {
			ended.WriteString(rec.Generation + " " + rec.ID + " " + rec.Status + "\n")
		}
		wb.Input(context.Background(), "tick")
	}
}

// crashHost is what TestCrashChild drives: a workbench, or a session on PostgreSQL.
type crashHost interface {
	Execute(ctx context.Context, code string) (crashRecord, error)
	Input(ctx context.Context, text string) (int64, error)
}

// crashRecord is what TestCrashChild notes of a cell that returned.
type crashRecord struct{ Generation, ID, Status string }

type workbenchHost struct{ *kiln.Workbench }

func (w workbenchHost) Execute(ctx context.Context, code string) (crashRecord, error) {
	rec, err := w.Workbench.Execute(ctx, code)
	return crashRecord{rec.Generation, rec.ID, string(rec.Status)}, err
}

type sessionHost struct{ *session.Session }

func (s sessionHost) Execute(ctx context.Context, code string) (crashRecord, error) {
	rec, err := s.Session.Execute(ctx, code, session.Watch{})
	return crashRecord{rec.Generation, rec.ID, string(rec.Status)}, err
}

// openCrashHost opens the crash test's host of session "crash" in dir, its record the
// PostgreSQL database storeURL names, else dir's.
func openCrashHost(t *testing.T, dir, storeURL string) (crashHost, error) {
	if storeURL == "" {
		wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: dir, SessionID: "crash", Workspace: t.TempDir(),
			Sandbox: kiln.SandboxNone})
		return workbenchHost{wb}, err
	}
	st, err := postgres.OpenStore(context.Background(), storeURL, store.Options{})
	if err != nil {
		return nil, err
	}
	s, err := session.Open(context.Background(), session.Config{ID: "crash", DataDir: dir, Store: st, Workspace: t.TempDir(),
		Sandbox: kiln.SandboxNone})
	return sessionHost{s}, err
}

func TestSIGKILLedHostsLeaveASoundRecord(t *testing.T) {
	t.Parallel()
	sigkilledHosts(t, "")
}

// TestSIGKILLedHostsLeaveASoundRecordOnPostgres: the same, the record a PostgreSQL
// database.
func TestSIGKILLedHostsLeaveASoundRecordOnPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	sigkilledHosts(t, srv.Database(t, "crash"))
}

// sigkilledHosts kills hosts of one record, in a data directory, its database the one
// storeURL names if any, and checks the record they leave.
func sigkilledHosts(t *testing.T, storeURL string) {
	dir := t.TempDir()
	crashtest.Run(t, crashtest.Config{Child: "TestCrashChild", Env: []string{crashDataEnv + "=" + dir, crashStoreEnv + "=" + storeURL},
		Kills: crashKills, EarlyEvery: 10, Progress: func() int64 { return crashtest.FileSize(filepath.Join(dir, answeredFile)) },
		Jitter: 150 * time.Millisecond, Patience: 30 * time.Second})
	ctx := context.Background()
	// A member of a JSON text, in the record's SQL.
	member := func(column, name string) string { return "json_extract(" + column + ", '$." + name + "')" }
	var st *store.Store
	var db *sql.DB
	if storeURL == "" {
		st, db = crashtest.Open(t, dir)
	} else {
		st, db = crashtest.OpenPostgres(t, storeURL)
		member = func(column, name string) string { return "(" + column + "::json->>'" + name + "')" }
	}
	counts := crashtest.Counts(t, db, map[string]string{
		"requests":                `SELECT count(*) FROM host_requests`,
		"replies":                 `SELECT count(*) FROM host_replies`,
		"replies without request": `SELECT count(*) FROM host_replies r LEFT JOIN host_requests q ON q.id = r.request_id WHERE q.id IS NULL`,
		"effects":                 `SELECT count(*) FROM effects`,
		"effects without request": `SELECT count(*) FROM effects e LEFT JOIN host_requests q ON q.id = e.request_id WHERE q.id IS NULL`,
		"receipts without reply":  `SELECT count(*) FROM effects e LEFT JOIN host_replies r ON r.request_id = e.request_id WHERE e.receipt IS NOT NULL AND r.request_id IS NULL`,
		"replies of run without receipt": `SELECT count(*) FROM host_replies r JOIN host_requests q ON q.id = r.request_id
			LEFT JOIN effects e ON e.request_id = q.id WHERE q.method = 'workspace.run' AND r.kind = 'ok' AND e.receipt IS NULL`,
		"journal without record": `SELECT count(*) FROM journal j WHERE (j.kind = 'reply' AND NOT EXISTS (SELECT 1 FROM host_replies WHERE request_id = j.ref_id))
			OR (j.kind = 'request' AND NOT EXISTS (SELECT 1 FROM host_requests WHERE id = j.ref_id))`,
		"generations": `SELECT count(*) FROM kernel_resets`,
		// Each host closes the cells its killed predecessors left running: only the last
		// host's last cell may be.
		"running before the last cell": `SELECT count(*) FROM executions WHERE ended_at_ms IS NULL
			AND id <> (SELECT max(id) FROM executions)`,
		"closed as the host ended": `SELECT count(*) FROM executions WHERE status = 'failed' AND error = '` + store.HostEndedMessage + `'`,
		"sends":                    `SELECT count(*) FROM effects WHERE kind = 'local.send' AND receipt IS NOT NULL`,
		"confirmed sends without event": `SELECT count(*) FROM effects e WHERE e.kind = 'local.send'
			AND ` + member("e.receipt", "status") + ` = 'confirmed'
			AND NOT EXISTS (SELECT 1 FROM events v WHERE v.id = CAST(` + member("e.receipt", "event_id") + ` AS BIGINT) AND v.source = 'agent')`,
		"speech without receipt": `SELECT count(*) FROM events v WHERE v.source = 'agent' AND NOT EXISTS
			(SELECT 1 FROM effects e WHERE e.id = CAST(` + member("v.payload", "effect_id") + ` AS BIGINT) AND e.receipt IS NOT NULL)`,
	})
	t.Logf("after %d kills: %v", crashKills, counts)
	crashtest.Zero(t, counts, "replies without request", "effects without request", "receipts without reply",
		"replies of run without receipt", "journal without record", "confirmed sends without event",
		"speech without receipt", "running before the last cell")
	if counts["replies"] == 0 || counts["generations"] < 2 || counts["sends"] == 0 || counts["closed as the host ended"] == 0 {
		t.Errorf("the hosts did too little to test anything: %v", counts)
	}
	if _, err := st.Log(ctx, store.LogFilter{}); err != nil {
		t.Errorf("reading the whole log: %v", err)
	}
	// Every reply a cell received is recorded with its request.
	data, err := os.ReadFile(filepath.Join(dir, answeredFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	lines = lines[:len(lines)-1] // the last is empty, or cut short by a kill
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue // a line cut short by a kill and completed by the next host's cell
		}
		var n int
		err := db.QueryRow(`SELECT count(*) FROM host_requests q JOIN host_replies r ON r.request_id = q.id
			WHERE q.generation = $1 AND q.execution_id = $2 AND q.request_id = $3 AND q.method = 'runtime.inspect'`,
			f[0], f[1], f[2]).Scan(&n)
		if err != nil || n != 1 {
			t.Errorf("the inspect %s, answered, is recorded %d times (%v)", line, n, err)
		}
	}
	if len(lines) < 20 {
		t.Errorf("only %d answered inspects: too few to test anything", len(lines))
	}
	t.Logf("%d answered inspects, each recorded", len(lines))
	// Every cell whose record Execute returned is recorded ended, as it was returned.
	data, err = os.ReadFile(filepath.Join(dir, endedFile))
	if err != nil {
		t.Fatal(err)
	}
	cells := strings.Split(string(data), "\n")
	cells = cells[:len(cells)-1] // the last is empty: each line is one write
	for _, line := range cells {
		f := strings.Fields(line)
		var status string
		err := db.QueryRow(`SELECT status FROM executions WHERE generation = $1 AND cell_id = $2 AND ended_at_ms IS NOT NULL`,
			f[0], f[1]).Scan(&status)
		if err != nil || status != f[2] {
			t.Errorf("the cell %s, returned, is recorded %q (%v)", line, status, err)
		}
	}
	t.Logf("%d cells returned, each recorded as returned", len(cells))
}

// holdDataEnv, when set, makes TestHoldChild a host of session "held" in that data
// directory whose second cell opens the FIFO holdFIFOEnv names, writes to it, and sleeps:
// the first is started by a transaction, the second through the backlog.
const (
	holdDataEnv = "KILN_HOLD_CHILD_DATA"
	holdFIFOEnv = "KILN_HOLD_CHILD_FIFO"
)

func TestHoldChild(t *testing.T) {
	dir := os.Getenv(holdDataEnv)
	if dir == "" {
		t.Skip("run by TestASessionHasOneHostAndADeadOnesCellIsClosed")
	}
	// The cell writes to a FIFO outside its workspace: it runs unconfined.
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: dir, SessionID: "held", Workspace: t.TempDir(),
		Sandbox: kiln.SandboxNone})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wb.Execute(context.Background(), "1"); err != nil {
		t.Fatal(err)
	}
	wb.Execute(context.Background(), `import os, time
fd = os.open(`+strconv.Quote(os.Getenv(holdFIFOEnv))+`, os.O_WRONLY)
os.write(fd, b"running\n")
os.close(fd)
time.sleep(100)`)
}

func TestASessionHasOneHostAndADeadOnesCellIsClosed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(t.TempDir(), "running")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self, "-test.run=^TestHoldChild$")
	child.Env = append(os.Environ(), holdDataEnv+"="+dir, holdFIFOEnv+"="+fifo, "TMPDIR="+crashtest.TempDir(t))
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	// Until the child's cell has written and closed it.
	if running := poll.ReadFIFO(t, fifo, time.Minute); running != "running\n" {
		t.Fatalf("the child's cell: %q", running)
	}
	ctx := context.Background()
	opts := kiln.WorkbenchOptions{DataDir: dir, SessionID: "held", Workspace: t.TempDir()}
	wb, err := kiln.OpenWorkbench(ctx, opts)
	if !errors.Is(err, kiln.ErrSessionHeld) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(child.Process.Pid)) {
		if err == nil {
			wb.Close()
		}
		t.Fatalf("a second host of a served session: %v; want ErrSessionHeld naming pid %d", err, child.Process.Pid)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	wb, err = kiln.OpenWorkbench(ctx, opts)
	if err != nil {
		t.Fatalf("after its host was killed, the session does not open: %v", err)
	}
	rec, err := wb.Execute(ctx, "1")
	if err != nil || rec.ID != "c-3" {
		t.Errorf("the next cell: %+v %v; want c-3", rec, err)
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenDir(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.SessionByName(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	e, err := st.ExecutionByCell(ctx, sess.ID, "c-2")
	if err != nil || e.Status != string(kiln.StatusFailed) || e.Error == nil || *e.Error != store.HostEndedMessage || e.EndedAt == nil {
		t.Errorf("the killed host's cell: %+v %v; want failed, %q", e, err, store.HostEndedMessage)
	}
	if _, _, err := st.LeaseHolder(ctx, store.SessionLeaseKey("held")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after Close the lease is %v; want released", err)
	}
}
