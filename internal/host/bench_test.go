package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/store"
)

// BenchmarkServeInspect is the router's share of a runtime.inspect round trip: admission,
// the service, and the committed record of request and reply, in a durable store: p50,
// p99 and CPU per request (the host's alone, its record's fold included; no worker runs).
func BenchmarkServeInspect(b *testing.B) {
	ctx := context.Background()
	st, err := store.OpenDir(ctx, b.TempDir(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sess, _, _ := st.EnsureSession(ctx, "bench")
	r := host.New(host.Config{Store: st, Session: sess})
	r.SetGeneration("g-1")
	m := perfstat.Start()
	cell := ""
	n := 0
	for b.Loop() {
		if n%host.MaxRequestsPerCell == 0 { // a new cell: the cap is per cell
			e, err := st.StartExecution(ctx, sess.ID, "g-1", "")
			if err != nil {
				b.Fatal(err)
			}
			cell = e.CellID
			r.Begin(cell)
		}
		n++
		t0 := time.Now()
		reply := r.Serve(ctx, call("g-1", cell, true))
		m.Add(time.Since(t0))
		if reply.Kind != "ok" {
			b.Fatalf("%+v", reply)
		}
	}
	m.Report(b, n)
}
