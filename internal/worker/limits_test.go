package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/kilnrt/kiln/internal/wire"
)

// TestMemoryErrorKeepsTheNamespace: a cell that fills the worker's address space gets
// MemoryError, recorded as the memory limit, and the worker survives it: the cells after
// it run in the same namespace, the filled memory still held. Both ways to fill it are
// tried: few large objects and many small ones.
func TestMemoryErrorKeepsTheNamespace(t *testing.T) {
	for _, tc := range []struct{ name, fill string }{
		{"large", "data = []\nwhile True: data.append(bytearray(10**6))"},
		{"small", "data = []\nwhile True: data.append([0] * 100)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startWorker(t, Config{MemoryBytes: 256 << 20})
			if rec := execute(t, w, "c-1", "x = 1"); rec.Status != wire.StatusOK {
				t.Fatalf("c-1: got %s %q", rec.Status, errText(rec))
			}
			rec := execute(t, w, "c-2", tc.fill)
			if rec.Status != wire.StatusError || rec.Limit != LimitMemory || rec.NamespaceLost {
				t.Fatalf("c-2: got %s, limit %q, lost %v, %q (stderr %v); want error, limit memory, namespace kept",
					rec.Status, rec.Limit, rec.NamespaceLost, errText(rec), rec.RawStderr)
			}
			for _, cell := range []struct{ id, code string }{{"c-3", "len(data) > 10"}, {"c-4", "x"}, {"c-5", "del data\nx + 1"}} {
				rec := execute(t, w, cell.id, cell.code)
				if rec.Status != wire.StatusOK || rec.Generation != "g-1" || len(rec.Output) != 1 {
					t.Fatalf("%s: got %s in %s, %v, %q; want ok in g-1", cell.id, rec.Status, rec.Generation, rec.Output, errText(rec))
				}
			}
		})
	}
}

// TestCPUSecondsChargeEachCellItsOwn: a thread an earlier cell left spinning is not the
// cell's that runs now. A cell that only waits, while that thread uses more CPU time
// than the limit and its overrun together, ends ok in the same generation; a cell that
// spins itself still hits the limit.
func TestCPUSecondsChargeEachCellItsOwn(t *testing.T) {
	w := startWorker(t, Config{CPUSeconds: 1})
	rec := execute(t, w, "c-1", `import resource, threading, time
def spin():
    while True:
        pass
for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime`)
	if rec.Status != wire.StatusOK {
		t.Fatalf("c-1: got %s %q", rec.Status, errText(rec))
	}
	// Past the worker's limit (1 s, and up to 1 s of rounding) and the host's overrun (2 s).
	rec = execute(t, w, "c-2", `start = cpu()
while cpu() < start + 4.5:
    time.sleep(0.05)
"waited"`)
	if rec.Status != wire.StatusOK || rec.Generation != "g-1" || rec.Limit != "" {
		t.Fatalf("c-2: got %s in %s, limit %q, %q; want ok in g-1", rec.Status, rec.Generation, rec.Limit, errText(rec))
	}
	rec = execute(t, w, "c-3", "while True:\n    pass")
	if rec.Status != wire.StatusError || rec.Limit != LimitCPU || rec.Generation != "g-1" {
		t.Errorf("c-3: got %s in %s, limit %q, %q; want error, cpu_seconds, in g-1", rec.Status, rec.Generation, rec.Limit, errText(rec))
	}
}

// TestASlowCompletionKeepsTheNamespace: a completion whose lookups outlast its timeout (a
// property that sleeps, evaluated to list what follows its dot) is interrupted and ends
// with ErrCompletion; the generation and its namespace go on, and the next completion
// is answered.
func TestASlowCompletionKeepsTheNamespace(t *testing.T) {
	w := startWorker(t, Config{})
	execute(t, w, "c-1", `import time
class Slow:
    @property
    def b(self):
        time.sleep(60)
a = Slow()
x = 41`)
	if _, err := w.Complete(context.Background(), "k-1", "a.b."); !errors.Is(err, ErrCompletion) {
		t.Fatalf("the slow completion: got %v; want ErrCompletion", err)
	}
	if rec := execute(t, w, "c-2", "x + 1"); rec.Status != wire.StatusOK || rec.Generation != "g-1" {
		t.Fatalf("c-2: got %s in %s %q; want ok in g-1", rec.Status, rec.Generation, errText(rec))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a caller that gave up already
	if _, err := w.Complete(ctx, "k-2", "a.b."); !errors.Is(err, ErrCompletion) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled completion: got %v; want ErrCompletion, cancelled", err)
	}
	if got, err := w.Complete(context.Background(), "k-3", "x"); err != nil || len(got) != 1 || got[0] != "x" {
		t.Errorf("the next completion: got %q, %v; want [x]", got, err)
	}
}
