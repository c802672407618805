package policy

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/zygote"
	kilnpy "github.com/kilnrt/kiln/python"
)

// BenchmarkDecision is one attention.plan decision of the initial release: warm, from a
// policy whose hooks worker is running; cold, from a policy with none, as the first
// decision after an idle stop is (the worker's start counts, as it does against the
// Budget), its worker spawned; cold-forked, the same with the worker forked from a
// zygote started before. p50, p99, and the CPU per decision of this process and its
// reaped children (a zygote's own share of a fork is not among them).
func BenchmarkDecision(b *testing.B) {
	cfg := Config{Python: pythonPath(b), SessionID: "bench", ReleaseID: Initial().ID}
	ctx := context.Background()
	decide := func(b *testing.B, p *Policy) {
		if a := p.Plan(ctx, 1, SourceDiscordDM, 1); a.Note != "" {
			b.Fatalf("%+v", a)
		}
	}
	b.Run("warm", func(b *testing.B) {
		p := New(cfg)
		defer p.Close()
		decide(b, p)
		measure(b, func() { decide(b, p) })
	})
	cold := func(b *testing.B, cfg Config) {
		measure(b, func() {
			p := New(cfg)
			decide(b, p)
			b.StopTimer()
			p.Close()
			b.StartTimer()
		})
	}
	b.Run("cold", func(b *testing.B) { cold(b, cfg) })
	b.Run("cold-forked", func(b *testing.B) {
		pool := zygote.NewPool(nil)
		defer pool.Close()
		forked := cfg
		forked.Package, forked.Forker = kilnpy.Sources(), pool
		p := New(forked) // starts the zygote
		decide(b, p)
		p.Close()
		cold(b, forked)
	})
}

// measure runs op until b is done and reports its p50, p99 and CPU per op, counting the
// CPU of children reaped meanwhile.
func measure(b *testing.B, op func()) {
	m := perfstat.Start()
	children := childrenCPU()
	n := 0
	for b.Loop() {
		n++
		start := time.Now()
		op()
		m.Add(time.Since(start))
	}
	f := m.Figures(n)
	b.ReportMetric(f.P50, "p50-µs")
	b.ReportMetric(f.P99, "p99-µs")
	b.ReportMetric(f.CPU+float64((childrenCPU()-children).Microseconds())/float64(n), "cpu-µs/op")
}

func childrenCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
