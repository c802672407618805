package worker

import (
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
