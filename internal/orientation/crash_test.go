package orientation_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/crashtest"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
)

// crashDataEnv, when set, makes TestMaintenanceCrashChild a host that opens, adopts and
// assesses into that data directory until it is killed.
const crashDataEnv = "KILN_MAINTENANCE_CRASH_DATA"

// crashKills is how many times the crash test kills the host.
const crashKills = 24

// The crash test's files in the data directory: the adoptions whose replies a cell
// received (operation id and adoption, a line each), and the next operation's number,
// written once an operation's reply was received.
const (
	adoptedFile = "adopted.txt"
	nextFile    = "next.txt"
)

// crashCell opens a work item, stages and adopts a candidate under the next operation
// id, and assesses the item, ten times. A host killed between an adoption's commit and
// the note of its reply leaves the operation to the next host, which stages the same
// candidate and adopts it under the same operation id again: the one adoption.
func crashCell(dir string) string {
	return `import os
seen = open(` + strconv.Quote(filepath.Join(dir, adoptedFile)) + `, "a", buffering=1)
path = ` + strconv.Quote(filepath.Join(dir, nextFile)) + `
n = int(open(path).read() or 0) if os.path.exists(path) else 0
for _ in range(10):
    item = await runtime.request("maintenance.originate", purpose=f"purpose {n}", reason="crash", evidence_refs=[])
    scope = {"kind": "global"} if n % 3 else {"kind": "session"}
    await runtime.request("orientation.stage", candidate_id=f"c-{n}", text=f"orientation {n}\n", scope=scope)
    outcome = "changed"
    try:
        a = await runtime.request("orientation.adopt", candidate_id=f"c-{n}", operation_id=f"op-{n}")
        seen.write(f"op-{n} {a['adoption']}\n")
    except runtime.HostError as e:
        if e.code != "orientation_conflict":
            raise
        outcome = "no-change"
    await runtime.request("maintenance.assess", work_item_id=item["work_item_id"], outcome=outcome)
    n += 1
    with open(path + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(path + ".tmp", path)
`
}

func TestMaintenanceCrashChild(t *testing.T) {
	dir := os.Getenv(crashDataEnv)
	if dir == "" {
		t.Skip("run by TestSIGKILLedHostsLeaveSoundSelfMaintenance")
	}
	// The cells note what they were answered in the data directory, which a sandbox
	// hides from them: they run unconfined.
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: dir, SessionID: "crash", Workspace: t.TempDir(),
		Sandbox: kiln.SandboxNone})
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("serving\n")
	for {
		wb.Execute(context.Background(), crashCell(dir))
	}
}

// Hosts killed with SIGKILL at random points of a stream of originations, adoptions and
// assessments leave a record whose work items, candidates, adoptions and their journal
// entries hold together, each adoption a cell saw recorded once, as it saw it, and an
// instruction chain that replays.
func TestSIGKILLedHostsLeaveSoundSelfMaintenance(t *testing.T) {
	dir := t.TempDir()
	adopted := filepath.Join(dir, adoptedFile)
	crashtest.Run(t, crashtest.Config{Child: "TestMaintenanceCrashChild", Env: []string{crashDataEnv + "=" + dir},
		Kills: crashKills, EarlyEvery: 6, Progress: func() int64 { return crashtest.FileSize(adopted) },
		Jitter: 100 * time.Millisecond, Patience: 60 * time.Second})

	ctx := context.Background()
	st, db := crashtest.Open(t, dir)
	answered := func(method string) string {
		return `SELECT q.id, r.value FROM host_requests q JOIN host_replies r ON r.request_id = q.id
			WHERE q.method = '` + method + `' AND r.kind = 'ok'`
	}
	counts := crashtest.Counts(t, db, map[string]string{
		"items":          `SELECT count(*) FROM work_items`,
		"closed items":   `SELECT count(*) FROM work_items WHERE state = 'closed'`,
		"adoptions":      `SELECT count(*) FROM orientation_adoptions`,
		"adopt requests": `SELECT count(*) FROM host_requests WHERE method = 'orientation.adopt'`,
		// Each row is made by a request answered ok in its transaction, and each such
		// answer names the row.
		"item without its answer": `SELECT count(*) FROM work_items w WHERE NOT EXISTS (SELECT 1 FROM (` + answered("maintenance.originate") + `) a
			WHERE a.id = w.request_id AND json_extract(a.value, '$.work_item_id') = 'w-' || w.id)`,
		"answer without its item": `SELECT count(*) FROM (` + answered("maintenance.originate") + `) a
			WHERE NOT EXISTS (SELECT 1 FROM work_items w WHERE w.request_id = a.id)`,
		"assessment without its answer": `SELECT count(*) FROM work_items w WHERE w.state = 'closed' AND NOT EXISTS
			(SELECT 1 FROM (` + answered("maintenance.assess") + `) a WHERE a.id = w.assess_request_id)`,
		"assess answer without a closed item": `SELECT count(*) FROM (` + answered("maintenance.assess") + `) a
			WHERE NOT EXISTS (SELECT 1 FROM work_items w WHERE w.assess_request_id = a.id AND w.state = 'closed')`,
		"candidate without its answer": `SELECT count(*) FROM orientation_candidates c WHERE NOT EXISTS
			(SELECT 1 FROM (` + answered("orientation.stage") + `) a WHERE a.id = c.request_id)`,
		"adoption without its answer": `SELECT count(*) FROM orientation_adoptions d WHERE NOT EXISTS (SELECT 1 FROM (` +
			answered("orientation.adopt") + `) a WHERE a.id = d.request_id AND json_extract(a.value, '$.adoption') = d.id)`,
		// An answer is the adoption its operation made, first or replayed.
		"adopt answer without its adoption": `SELECT count(*) FROM (` + answered("orientation.adopt") + `) a
			JOIN host_requests q ON q.id = a.id WHERE NOT EXISTS (SELECT 1 FROM orientation_adoptions d
			WHERE d.id = json_extract(a.value, '$.adoption') AND d.operation_id = json_extract(q.request, '$.operation_id'))`,
		"replayed adoptions": `SELECT count(*) FROM (` + answered("orientation.adopt") + `) a
			WHERE NOT EXISTS (SELECT 1 FROM orientation_adoptions d WHERE d.request_id = a.id)`,
		// Each adoption follows the one before it in its scope and target.
		"adoption off its chain": `SELECT count(*) FROM orientation_adoptions d WHERE d.previous <> coalesce((SELECT max(p.id)
			FROM orientation_adoptions p WHERE p.scope_session = d.scope_session AND p.target = d.target AND p.id < d.id), 0)`,
		// Each change is journaled once, and each entry names a row.
		"change journaled other than once": `SELECT (SELECT count(*) FROM work_items w WHERE (SELECT count(*) FROM journal j
				WHERE j.kind = 'work_item' AND j.ref_id = w.id) <> 1)
			+ (SELECT count(*) FROM work_items w WHERE (SELECT count(*) FROM journal j
				WHERE j.kind = 'work_item.assessed' AND j.ref_id = w.id) <> (w.state = 'closed'))
			+ (SELECT count(*) FROM orientation_candidates c WHERE (SELECT count(*) FROM journal j
				WHERE j.kind = 'orientation.candidate' AND j.ref_id = c.id) <> 1)
			+ (SELECT count(*) FROM orientation_adoptions d WHERE (SELECT count(*) FROM journal j
				WHERE j.kind = 'orientation.adoption' AND j.ref_id = d.id) <> 1)`,
		"entry without its row": `SELECT count(*) FROM journal j WHERE
			(j.kind IN ('work_item', 'work_item.assessed') AND NOT EXISTS (SELECT 1 FROM work_items WHERE id = j.ref_id))
			OR (j.kind = 'orientation.candidate' AND NOT EXISTS (SELECT 1 FROM orientation_candidates WHERE id = j.ref_id))
			OR (j.kind = 'orientation.adoption' AND NOT EXISTS (SELECT 1 FROM orientation_adoptions WHERE id = j.ref_id))`,
	})
	t.Logf("after %d kills: %v", crashKills, counts)
	crashtest.Zero(t, counts, "item without its answer", "answer without its item", "assessment without its answer",
		"assess answer without a closed item", "candidate without its answer", "adoption without its answer",
		"adopt answer without its adoption", "adoption off its chain", "change journaled other than once",
		"entry without its row")
	if counts["adoptions"] < 20 || counts["closed items"] < 20 {
		t.Errorf("the hosts did too little to test anything: %v", counts)
	}
	if _, err := st.Log(ctx, store.LogFilter{}); err != nil {
		t.Errorf("reading the whole log: %v", err)
	}

	// Every adoption a cell received is recorded once, as it received it.
	data, err := os.ReadFile(adopted)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	seen := map[string]string{}
	for _, line := range lines[:len(lines)-1] { // the last is empty, or cut short by a kill
		f := strings.Fields(line)
		if len(f) != 2 {
			continue // cut short by a kill, and completed by the next host's cell
		}
		if prior, ok := seen[f[0]]; ok && prior != f[1] {
			t.Errorf("%s answered adoption %s, then %s", f[0], prior, f[1])
		}
		seen[f[0]] = f[1]
		var id int64
		if err := db.QueryRow(`SELECT id FROM orientation_adoptions WHERE operation_id = ?`, f[0]).Scan(&id); err != nil ||
			strconv.FormatInt(id, 10) != f[1] {
			t.Errorf("%s, answered adoption %s, is recorded as %d (%v)", f[0], f[1], id, err)
		}
	}
	t.Logf("%d operations answered, each recorded once as answered", len(seen))

	// The instruction chain, through every adoption observed, replays.
	sess, err := st.SessionByName(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Load(ctx, st, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	links := tr.Links()
	if res := transcript.Resolve(links); !res.Complete || len(res.Broken) > 0 {
		t.Errorf("the chain of %d links does not replay: %s %v", len(links), res.Problem, res.Broken)
	}
	t.Logf("the chain of %d links replays", len(links))
}
