package policy

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/perfstat"
)

// BenchmarkDecision is one attention.plan decision of the initial release: warm, from a
// policy whose hooks worker is running; cold, from a policy with none, as the first
// decision after an idle stop is (the worker's start counts, as it does against the
// Budget). p50, p99, and the CPU per decision of this process and its reaped children.
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
	b.Run("cold", func(b *testing.B) {
		measure(b, func() {
			p := New(cfg)
			decide(b, p)
			b.StopTimer()
			p.Close()
			b.StartTimer()
		})
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
