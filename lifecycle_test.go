package kiln_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/journal"
)

// openWorkbench opens an ephemeral workbench closed when t ends.
func openWorkbench(t *testing.T) *kiln.Workbench {
	t.Helper()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	return wb
}

func TestACellTheHostCannotSendLeavesTheWorkbenchUsable(t *testing.T) {
	wb := openWorkbench(t)
	rec, err := wb.Execute(context.Background(), "x = \"\xff\"")
	if err != nil || rec.Status != kiln.StatusError || rec.Error == nil || !strings.Contains(*rec.Error, "offset 5") {
		t.Fatalf("got %+v %v; want an error record naming offset 5", rec, err)
	}
	rec, err = wb.Execute(context.Background(), "1+1")
	if err != nil || rec.Output[0].Text != "2" || rec.Generation != "g-1" {
		t.Errorf("next cell: %+v %v; want 2 in g-1", rec, err)
	}
}

// A source over the limit is refused and recorded not run, its record keeping at most
// the limit's bytes of it, with the whole source's size and digest; a source of exactly
// the limit runs, kept whole; and the workbench serves on.
func TestARefusedSourceCostsTheRecordNoMoreThanTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{DataDir: data, Workspace: t.TempDir(), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	filled := func(head string, size int) string { return head + strings.Repeat("#", size-len(head)) }
	cells := []struct {
		code string
		runs bool
	}{
		{filled("x = 1\n#", 6<<20), false},
		{filled("y = 2\n#", wire.MaxCodeBytes), true},
		{filled("x = 3\n#", wire.MaxCodeBytes+1), false},
		{filled("x = 'é'\n#", wire.MaxCodeBytes-1) + "é", false}, // the limit falls inside its last character
	}
	ids := map[string]int{}
	for i, c := range cells {
		rec, err := wb.Execute(ctx, c.code)
		if err != nil {
			t.Fatalf("cell %d: %v", i, err)
		}
		if ran := rec.Status == kiln.StatusOK && !rec.NotRun; ran != c.runs {
			t.Errorf("cell %d of %d bytes: %s, not run %v; want it run: %v", i, len(c.code), rec.Status, rec.NotRun, c.runs)
		}
		if !c.runs && (rec.Status != kiln.StatusError || rec.Error == nil || !strings.Contains(*rec.Error, "over the limit")) {
			t.Errorf("cell %d of %d bytes: %+v; want it refused for its size", i, len(c.code), rec)
		}
		ids[rec.ID] = i
	}
	if rec, err := wb.Execute(ctx, "'x' in globals(), y"); err != nil || len(rec.Output) != 1 || rec.Output[0].Text != "(False, 2)" {
		t.Errorf("the cell after: %+v %v; want (False, 2): only the cell at the limit ran", rec, err)
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}

	j, err := journal.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	entries, err := j.Log(ctx, journal.LogFilter{Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range entries {
		r, ok := e.Record.(journal.LogCell)
		i, mine := ids[r.CellID]
		if !ok || !mine {
			continue
		}
		seen++
		c := cells[i]
		sum := sha256.Sum256([]byte(c.code))
		if r.CodeBytes != int64(len(c.code)) || r.CodeSHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s %s: %d bytes, digest %s; want the whole source's, %d bytes", e.Kind, r.CellID, r.CodeBytes, r.CodeSHA256, len(c.code))
		}
		if len(r.Code) > wire.MaxCodeBytes || !strings.HasPrefix(c.code, r.Code) || !utf8.ValidString(r.Code) {
			t.Errorf("%s %s keeps %d bytes of its source of %d; want a prefix, valid UTF-8, of at most %d",
				e.Kind, r.CellID, len(r.Code), len(c.code), wire.MaxCodeBytes)
		}
		if len(r.Code) < wire.MaxCodeBytes-utf8.UTFMax || c.runs && r.Code != c.code {
			t.Errorf("%s %s keeps %d bytes of its source of %d; want all the limit allows", e.Kind, r.CellID, len(r.Code), len(c.code))
		}
		if e.Kind == journal.EntryCellEnd && r.NotRun == c.runs {
			t.Errorf("%s ended %s, not run %v; want not run: %v", r.CellID, r.Status, r.NotRun, !c.runs)
		}
	}
	if seen != 2*len(cells) {
		t.Errorf("%d entries of the cells; want a start and an end of each of %d", seen, len(cells))
	}
}

func TestCloseReturnsOnceTheWorkersDirectoryIsGone(t *testing.T) {
	// A directory of its own, to see what is left in it, and short: the worker's socket
	// path must fit a sockaddr_un.
	tmp, err := os.MkdirTemp("/tmp", "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	wb := openWorkbench(t)
	if _, err := wb.Execute(context.Background(), "1"); err != nil {
		t.Fatal(err)
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(os.TempDir())
	if err != nil || len(left) != 0 {
		t.Errorf("left in the temporary directory: %v %v; want nothing", left, err)
	}
}

func TestInterruptRunningNeedsNoID(t *testing.T) {
	t.Parallel()
	wb := openWorkbench(t)
	if _, err := wb.InterruptRunning(); !errors.Is(err, kiln.ErrNotRunning) {
		t.Fatalf("with no cell running: got %v; want ErrNotRunning", err)
	}
	interrupted := make(chan string, 1)
	rec, err := wb.ExecuteStream(context.Background(), "print('ready', flush=True)\nimport time\ntime.sleep(30)",
		func(_ string, out kiln.Output) {
			if out.Text != "ready\n" {
				return
			}
			id, err := wb.InterruptRunning()
			if err != nil {
				t.Errorf("interrupting the running cell: %v", err)
			}
			interrupted <- id
		})
	if err != nil {
		t.Fatal(err)
	}
	if id := <-interrupted; id != rec.ID || rec.Status != kiln.StatusInterrupted {
		t.Errorf("interrupted %q; the cell %q ended %s; want it interrupted by its id", id, rec.ID, rec.Status)
	}
	if _, err := wb.InterruptRunning(); !errors.Is(err, kiln.ErrNotRunning) {
		t.Errorf("after the cell: got %v; want ErrNotRunning", err)
	}
}
