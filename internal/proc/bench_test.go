package proc

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStartToReaped is one child's whole life, `true` started and reaped, as the
// leader of its own group and as init of its own namespaces: what containment costs. It
// reports p50 and p99 in µs and the CPU per run (the host's and the child's) in µs.
func BenchmarkStartToReaped(b *testing.B) {
	for _, c := range []struct {
		name    string
		contain bool
	}{{"group", false}, {"namespace", true}} {
		b.Run(c.name, func(b *testing.B) {
			samples := make([]time.Duration, 0, b.N)
			cpu := cpuTime()
			for b.Loop() {
				start := time.Now()
				p, err := Start(Command{Path: "true", Contain: c.contain})
				if err != nil {
					b.Fatal(err)
				}
				<-p.Exited()
				<-p.Drained()
				samples = append(samples, time.Since(start))
				if p.Namespaced() != c.contain {
					b.Fatalf("namespaced %v; want %v", p.Namespaced(), c.contain)
				}
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(len(samples)), "CPU-µs/op")
		})
	}
}

// cpuTime is the CPU time, user and system, of this process and its reaped children.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		syscall.Getrusage(who, &ru)
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// BenchmarkCloseOnExecFrom: what KeepInherited costs the first time a process starts
// a child (one close_range(2) over every descriptor from 3 on).
func BenchmarkCloseOnExecFrom(b *testing.B) {
	for b.Loop() {
		if err := CloseOnExecFrom(3); err != nil {
			b.Fatal(err)
		}
	}
}
