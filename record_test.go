package kiln_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/journal"
)

// recordWith runs cells that leave every kind of workbench record in a new data
// directory's session "s" — output, host requests and replies, an effect, a wait woken
// by an input, a failed cell, a generation that ends — and returns the directory.
func recordWith(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	ctx := context.Background()
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{DataDir: data, Workspace: t.TempDir(), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	for _, code := range []string{
		`print("hi")`,
		`await runtime.inspect()`,
		`await runtime.request("workspace.run", argv=["true"])`,
		`await runtime.wait(None, "for the operator")`,
		`1/0`,
	} {
		if _, err := wb.Execute(ctx, code); err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		if strings.HasPrefix(code, "await runtime.wait") {
			if _, err := wb.Input(ctx, "wake up"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rec, err := wb.Execute(ctx, "import os; os._exit(3)"); err != nil || rec.Status != kiln.StatusFailed {
		t.Fatalf("a worker that exits: %v %+v", err, rec)
	}
	value(t, wb, "1 + 1") // in generation g-2
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	served(t, data, func(d *client.Daemon) { // a daemon records the output of a cell as it comes
		if _, err := d.OpenSession(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		if rec, err := d.Execute(ctx, "d", `print("streamed")`, nil); err != nil || rec.Status != kiln.StatusOK {
			t.Fatalf("through the daemon: %v %+v", err, rec)
		}
	})
	return data
}

// served runs fn with a client of a daemon serving data, and returns once the daemon has
// stopped.
func served(t *testing.T, data string, fn func(*client.Daemon)) {
	t.Helper()
	servedWith(t, daemon.Options{DataDir: data, Workspace: t.TempDir()}, fn)
}

// TestAJournalReadsTheLogAsTheRecordHasIt checks that the public log entries, marshalled,
// are the stored entries marshalled — what kiln log --json has always printed — for
// every kind a workbench writes, and that the filters select as they say.
func TestAJournalReadsTheLogAsTheRecordHasIt(t *testing.T) {
	t.Parallel()
	data := recordWith(t)
	ctx := context.Background()
	st, err := store.OpenDir(ctx, data, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	want, err := st.Log(ctx, store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j.Path() != filepath.Join(data, journal.RecordFile) {
		t.Errorf("path %s", j.Path())
	}
	got, err := j.Log(ctx, journal.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries; want %d", len(got), len(want))
	}
	kinds := map[journal.EntryKind]bool{}
	for i := range want {
		w, _ := json.Marshal(want[i], json.Deterministic(true))
		g, err := json.Marshal(got[i], json.Deterministic(true))
		if err != nil {
			t.Fatal(err)
		}
		if string(g) != string(w) {
			t.Errorf("entry %d:\ngot  %s\nwant %s", i, g, w)
		}
		kinds[got[i].Kind] = true
	}
	for _, k := range []journal.EntryKind{journal.EntrySession, journal.EntryGenerationStart, journal.EntryGenerationEnd,
		journal.EntryCellStart, journal.EntryCellEnd, journal.EntryOutput, journal.EntryInput, journal.EntryRequest, journal.EntryReply,
		journal.EntryEffect, journal.EntryReceipt, journal.EntryWait, journal.EntryWaitEnd, journal.EntryPromptHeader} {
		if !kinds[k] {
			t.Errorf("no %s entry: the test covers less than it says", k)
		}
	}
	var failed *journal.LogCell
	for _, e := range got {
		if c, ok := e.Record.(journal.LogCell); ok && e.Kind == journal.EntryCellEnd && c.Status == kiln.StatusError {
			failed = &c
		}
	}
	if failed == nil || failed.Error == nil {
		t.Fatalf("the failed cell: %+v", failed)
	}
	if e, err := failed.Raised(); err != nil || e == nil || e.Type != "ZeroDivisionError" || e.Traceback != *failed.Error {
		t.Errorf("what the failed cell raised: %+v, %v", e, err)
	}
	printed := 0
	for _, e := range got {
		c, ok := e.Record.(journal.LogCell)
		if !ok || c.Code != `print("hi")` {
			continue
		}
		printed++
		if out, err := c.Outputs(); err != nil || len(out) != 1 || out[0].Stream != "stdout" || out[0].Text != "hi\n" {
			t.Errorf("its output: %+v, %v", out, err)
		}
		if e, err := c.Raised(); e != nil || err != nil {
			t.Errorf("it raised %+v, %v", e, err)
		}
	}
	if printed != 2 {
		t.Errorf("the cell that printed has %d entries; want its start and its end", printed)
	}

	later, err := j.Log(ctx, journal.LogFilter{Session: "s", Since: got[2].Seq, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(later) != 3 || later[0].Seq != got[3].Seq {
		t.Errorf("since %d, 3: got %+v", got[2].Seq, later)
	}
	if _, err := j.Log(ctx, journal.LogFilter{Session: "nobody"}); !errors.Is(err, journal.ErrNoSession) || !strings.Contains(err.Error(), `session "nobody"`) {
		t.Errorf("a session the record lacks: %v", err)
	}
	sessions, err := j.Sessions(ctx)
	if err != nil || len(sessions) != 2 || sessions[0].Name != "s" || sessions[1].Name != "d" {
		t.Errorf("sessions: %+v %v", sessions, err)
	}
	if s, err := j.Session(ctx, "s"); err != nil || s != sessions[0] {
		t.Errorf("session s: %+v %v", s, err)
	}
}

// TestAJournalNeverWrites checks that reading a record through a Journal changes no file
// of the data directory (SQLite's WAL files aside), and that a directory without a
// record is ErrNoRecord and stays as it was.
func TestAJournalNeverWrites(t *testing.T) {
	t.Parallel()
	data := recordWith(t)
	ctx := context.Background()
	before := files(t, data)
	j, err := journal.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Log(ctx, journal.LogFilter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Sessions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if after := files(t, data); !slices.Equal(before, after) {
		t.Errorf("the directory changed:\n%q\nthen\n%q", before, after)
	}

	empty := t.TempDir()
	missing := filepath.Join(empty, "typo")
	for _, dir := range []string{empty, missing} {
		if _, err := journal.Open(ctx, dir); !errors.Is(err, journal.ErrNoRecord) {
			t.Errorf("%s: got %v; want ErrNoRecord", dir, err)
		}
	}
	if got := files(t, empty); len(got) != 0 {
		t.Errorf("made: %q", got)
	}
}

// files lists every file under dir with a digest of its content, but SQLite's WAL
// files, which any reader may make.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "-wal") || strings.HasSuffix(path, "-shm") {
			return err
		}
		b, err := os.ReadFile(path)
		out = append(out, fmt.Sprintf("%s %x", path, sha256.Sum256(b)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestThePublicNamesAreTheRecordsOwn checks the constants package kiln spells out
// against the ones the record is written with.
func TestThePublicNamesAreTheRecordsOwn(t *testing.T) {
	pairs := [][2]string{
		{string(journal.EntrySession), store.KindSession}, {string(journal.EntryGenerationStart), store.KindKernelReset},
		{string(journal.EntryGenerationEnd), store.KindKernelEnd}, {string(journal.EntryCellStart), store.KindExecution},
		{string(journal.EntryCellEnd), store.KindExecutionEnd}, {string(journal.EntryOutput), store.KindOutput},
		{string(journal.EntryInput), store.KindEvent}, {string(journal.EntryRequest), store.KindRequest},
		{string(journal.EntryReply), store.KindReply}, {string(journal.EntryEffect), store.KindEffect},
		{string(journal.EntryReceipt), store.KindReceipt}, {string(journal.EntryWait), store.KindWait},
		{string(journal.EntryWaitEnd), store.KindWaitEnd}, {string(journal.EntryPromptHeader), store.KindPromptHeader},
		{string(journal.EntryPromptRevision), store.KindPromptChange}, {string(journal.EntryTurnStart), store.KindTurnStart},
		{string(journal.EntryTurnEnd), store.KindTurnEnd}, {string(journal.EntryModelCall), store.KindModelCall},
		{string(journal.EntryFold), store.KindFold},
		{string(journal.CellRunning), store.StatusRunning}, {string(kiln.StatusFailed), store.StatusFailed},
		{journal.SourceOperator, store.SourceOperator}, {journal.SourceAgent, store.SourceAgent},
		{journal.WaitWaiting, store.WaitWaiting}, {journal.WaitInputPending, store.WaitInputPending},
		{journal.WaitWoken, store.WaitWoken}, {journal.WaitSuperseded, store.WaitSuperseded},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("got %q; want %q", p[0], p[1])
		}
	}
}

// TestInitDataDirMakesTheRecordAndIsSafeAgain checks that InitDataDir makes a data
// directory, its record and its managed skills root, that a second call finds them as
// they were, and that the record it made reads as empty.
func TestInitDataDirMakesTheRecordAndIsSafeAgain(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "new", "data")
	info, err := admin.InitDataDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Record != filepath.Join(dir, journal.RecordFile) || info.Skills != filepath.Join(dir, "skills") || info.SchemaVersion != store.SchemaVersion {
		t.Errorf("got %+v", info)
	}
	if st, err := os.Stat(info.Skills); err != nil || !st.IsDir() {
		t.Errorf("the skills root: %v", err)
	}
	if again, err := admin.InitDataDir(ctx, dir); err != nil || again != info {
		t.Errorf("again: %+v, %v", again, err)
	}
	j, err := journal.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if s, err := j.Sessions(ctx); err != nil || len(s) != 0 {
		t.Errorf("sessions %+v, %v", s, err)
	}
}

func TestParseInstructionSource(t *testing.T) {
	if got, err := kiln.ParseInstructionSource("style=docs/style.md"); err != nil || got != (kiln.InstructionSource{Name: "style", Path: "docs/style.md"}) {
		t.Errorf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"style", "style=", "=x.md", "a b=x.md", "contract=x.md"} {
		if got, err := kiln.ParseInstructionSource(bad); err == nil {
			t.Errorf("%q: got %+v", bad, got)
		}
	}
}
