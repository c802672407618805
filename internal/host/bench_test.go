package host_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
)

// BenchmarkServeInspect is the router's share of a runtime.inspect round trip: admission,
// the service, and the committed record of request and reply, in a durable store.
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
	samples := make([]time.Duration, 0, b.N)
	cell := ""
	for b.Loop() {
		if len(samples)%host.MaxRequestsPerCell == 0 { // a new cell: the cap is per cell
			e, err := st.StartExecution(ctx, sess.ID, "g-1", "")
			if err != nil {
				b.Fatal(err)
			}
			cell = e.CellID
			r.Begin(cell)
		}
		t0 := time.Now()
		reply := r.Serve(ctx, call("g-1", cell, true))
		samples = append(samples, time.Since(t0))
		if reply.Kind != "ok" {
			b.Fatalf("%+v", reply)
		}
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1000, "median-µs")
}
