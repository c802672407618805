package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/worker"
)

// openSession opens an ephemeral session closed when t ends.
func openSession(t *testing.T) *Session {
	t.Helper()
	wb, err := Open(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	return wb
}

// endIdle ends the current generation from inside with exit status 7, between cells,
// and waits until the host has seen it end.
func endIdle(t *testing.T, wb *Session) *worker.Worker {
	t.Helper()
	wb.mu.Lock()
	w := wb.current
	wb.mu.Unlock()
	rec, err := wb.Execute(context.Background(), "marker = 1\nimport threading, os\nthreading.Timer(0.05, os._exit, [7]).start()", Watch{})
	if err != nil || rec.Status != wire.StatusOK {
		t.Fatalf("got %+v %v", rec, err)
	}
	<-w.Done()
	return w
}

func TestAGenerationThatEndsIdleIsToldToTheNextCell(t *testing.T) {
	wb := openSession(t)
	endIdle(t, wb)
	rec, err := wb.Execute(context.Background(), `"marker" in globals()`, Watch{})
	if err != nil || rec.Status != wire.StatusOK || rec.Output[0].Text != "False" || rec.Generation != "g-2" {
		t.Fatalf("got %+v %v; want False, in g-2", rec, err)
	}
	if !rec.NamespaceLost || !strings.Contains(rec.NamespaceLostReason, "g-1") || !strings.Contains(rec.NamespaceLostReason, "7") {
		t.Errorf("got namespace_lost %v, %q; want it lost, naming g-1 and its exit status", rec.NamespaceLost, rec.NamespaceLostReason)
	}
	rec, err = wb.Execute(context.Background(), "1", Watch{})
	if err != nil || rec.NamespaceLost || rec.NamespaceLostReason != "" {
		t.Errorf("the cell after: %+v %v; want nothing lost", rec, err)
	}
}

// A generation that ends between cells is in the durable record as soon as the host
// sees it end, with its exit status, before any further cell.
func TestAGenerationThatEndsIdleIsRecordedAtOnce(t *testing.T) {
	wb := openSession(t)
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
	rec, err := wb.Execute(context.Background(), "1", Watch{})
	if err != nil || !rec.NamespaceLost || !strings.Contains(rec.NamespaceLostReason, *kr.EndCause) {
		t.Errorf("the next cell: %+v %v; want its namespace lost, saying why", rec, err)
	}
}

// Cells started together after a generation has ended start one new generation: one
// runs, the others are refused as busy, and none starts a generation of its own.
func TestConcurrentCellsAfterAnEndStartOneGeneration(t *testing.T) {
	wb := openSession(t)
	for round := range 3 {
		endIdle(t, wb)
		var wg sync.WaitGroup
		recs := make([]worker.Record, 4)
		errs := make([]error, 4)
		for i := range recs {
			wg.Go(func() { recs[i], errs[i] = wb.Execute(context.Background(), "1", Watch{}) })
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
