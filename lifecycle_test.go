package kiln

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// openWorkbench opens an ephemeral workbench closed when t ends.
func openWorkbench(t *testing.T) *Workbench {
	t.Helper()
	wb, err := OpenWorkbench(context.Background(), WorkbenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	return wb
}

// endIdle ends the current generation from inside with exit status 7, between cells,
// and waits until the host has seen it end.
func endIdle(t *testing.T, wb *Workbench) *worker.Worker {
	t.Helper()
	wb.mu.Lock()
	w := wb.current
	wb.mu.Unlock()
	rec, err := wb.Execute(context.Background(), "marker = 1\nimport threading, os\nthreading.Timer(0.05, os._exit, [7]).start()")
	if err != nil || rec.Status != StatusOK {
		t.Fatalf("got %+v %v", rec, err)
	}
	<-w.Done()
	return w
}

func TestAGenerationThatEndsIdleIsToldToTheNextCell(t *testing.T) {
	wb := openWorkbench(t)
	endIdle(t, wb)
	rec, err := wb.Execute(context.Background(), `"marker" in globals()`)
	if err != nil || rec.Status != StatusOK || rec.Output[0].Text != "False" || rec.Generation != "g-2" {
		t.Fatalf("got %+v %v; want False, in g-2", rec, err)
	}
	if !rec.NamespaceLost || !strings.Contains(rec.NamespaceLostReason, "g-1") || !strings.Contains(rec.NamespaceLostReason, "7") {
		t.Errorf("got namespace_lost %v, %q; want it lost, naming g-1 and its exit status", rec.NamespaceLost, rec.NamespaceLostReason)
	}
	rec, err = wb.Execute(context.Background(), "1")
	if err != nil || rec.NamespaceLost || rec.NamespaceLostReason != "" {
		t.Errorf("the cell after: %+v %v; want nothing lost", rec, err)
	}
}

// A generation that ends between cells is in the durable record as soon as the host
// sees it end, with its exit status, before any further cell.
func TestAGenerationThatEndsIdleIsRecordedAtOnce(t *testing.T) {
	wb := openWorkbench(t)
	wb.mu.Lock()
	recorded := wb.recorded
	wb.mu.Unlock()
	endIdle(t, wb)
	<-recorded
	entries, err := wb.store.Log(context.Background(), store.LogFilter{Session: wb.session.ID})
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	kr, ok := last.Record.(store.KernelReset)
	if last.Kind != store.KindKernelEnd || !ok || kr.Generation != "g-1" || kr.EndedAt == nil ||
		kr.EndCause == nil || !strings.Contains(*kr.EndCause, "7") {
		t.Fatalf("the last entry: %s %+v; want g-1's end, with exit status 7", last.Kind, last.Record)
	}
	rec, err := wb.Execute(context.Background(), "1")
	if err != nil || !rec.NamespaceLost || !strings.Contains(rec.NamespaceLostReason, *kr.EndCause) {
		t.Errorf("the next cell: %+v %v; want its namespace lost, saying why", rec, err)
	}
}

// Cells started together after a generation has ended start one new generation: one
// runs, the others are refused as busy, and none starts a generation of its own.
func TestConcurrentCellsAfterAnEndStartOneGeneration(t *testing.T) {
	wb := openWorkbench(t)
	for round := range 3 {
		endIdle(t, wb)
		var wg sync.WaitGroup
		recs := make([]Record, 4)
		errs := make([]error, 4)
		for i := range recs {
			wg.Go(func() { recs[i], errs[i] = wb.Execute(context.Background(), "1") })
		}
		wg.Wait()
		want := []string{"g-2", "g-3", "g-4"}[round]
		ran := 0
		for i := range recs {
			switch {
			case errs[i] == nil && recs[i].Generation == want:
				ran++
			case errors.Is(errs[i], ErrBusy) && errs[i].Error() == ErrBusy.Error():
			default:
				t.Errorf("round %d, cell %d: %+v %v; want a record of %s or ErrBusy", round, i, recs[i], errs[i], want)
			}
		}
		if ran == 0 || wb.Generation() != want {
			t.Errorf("round %d: %d cells ran, generation %s; want some in %s", round, ran, wb.Generation(), want)
		}
	}
}

func TestACellTheHostCannotSendLeavesTheWorkbenchUsable(t *testing.T) {
	wb := openWorkbench(t)
	rec, err := wb.Execute(context.Background(), "x = \"\xff\"")
	if err != nil || rec.Status != StatusError || rec.Error == nil || !strings.Contains(*rec.Error, "offset 5") {
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
	ctx := context.Background()
	data := t.TempDir()
	wb, err := OpenWorkbench(ctx, WorkbenchOptions{DataDir: data, Workspace: t.TempDir(), SessionID: "s"})
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
		if ran := rec.Status == StatusOK && !rec.NotRun; ran != c.runs {
			t.Errorf("cell %d of %d bytes: %s, not run %v; want it run: %v", i, len(c.code), rec.Status, rec.NotRun, c.runs)
		}
		if !c.runs && (rec.Status != StatusError || rec.Error == nil || !strings.Contains(*rec.Error, "over the limit")) {
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

	j, err := OpenJournal(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	entries, err := j.Log(ctx, LogFilter{Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range entries {
		r, ok := e.Record.(LogCell)
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
		if e.Kind == EntryCellEnd && r.NotRun == c.runs {
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
	wb := openWorkbench(t)
	if _, err := wb.InterruptRunning(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("with no cell running: got %v; want ErrNotRunning", err)
	}
	interrupted := make(chan string, 1)
	rec, err := wb.ExecuteStream(context.Background(), "print('ready', flush=True)\nimport time\ntime.sleep(30)",
		func(_ string, out Output) {
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
	if id := <-interrupted; id != rec.ID || rec.Status != StatusInterrupted {
		t.Errorf("interrupted %q; the cell %q ended %s; want it interrupted by its id", id, rec.ID, rec.Status)
	}
	if _, err := wb.InterruptRunning(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("after the cell: got %v; want ErrNotRunning", err)
	}
}
