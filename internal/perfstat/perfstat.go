// Package perfstat measures round trips as kiln reports them: the median and 99th
// percentile of their latency, and the CPU each one cost every process involved (this
// one, and the workers named), never one figure without the others.
package perfstat

import (
	"slices"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/proc"
)

// Meter collects the latencies of round trips and the CPU spent since it started.
type Meter struct {
	pids    []int
	cpu0    time.Duration
	samples []time.Duration
}

// Start begins measuring this process and the processes pids.
func Start(pids ...int) *Meter {
	m := &Meter{pids: pids}
	m.cpu0 = m.cpu()
	return m
}

// Add records one round trip's latency.
func (m *Meter) Add(d time.Duration) { m.samples = append(m.samples, d) }

// Figures are a measurement's three numbers, in microseconds.
type Figures struct {
	P50, P99, CPU float64 // latency percentiles, and CPU per round trip
}

// Figures returns the percentiles of what was added and the CPU spent since Start over
// ops round trips (usually the number added).
func (m *Meter) Figures(ops int) Figures {
	if len(m.samples) == 0 || ops == 0 {
		return Figures{}
	}
	s := slices.Sorted(slices.Values(m.samples))
	at := func(p int) float64 { return float64(s[min(len(s)-1, len(s)*p/100)].Nanoseconds()) / 1000 }
	return Figures{P50: at(50), P99: at(99), CPU: float64((m.cpu() - m.cpu0).Nanoseconds()) / 1000 / float64(ops)}
}

// Reporter is what reports a benchmark's metrics: a *testing.B.
type Reporter interface {
	ReportMetric(n float64, unit string)
}

// Report reports Figures(ops) as p50-µs, p99-µs and cpu-µs/op.
func (m *Meter) Report(b Reporter, ops int) {
	f := m.Figures(ops)
	b.ReportMetric(f.P50, "p50-µs")
	b.ReportMetric(f.P99, "p99-µs")
	b.ReportMetric(f.CPU, "cpu-µs/op")
}

// cpu is the user and system time of this process and of the pids so far.
func (m *Meter) cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, pid := range m.pids {
		if d, err := proc.ProcessCPU(pid); err == nil {
			total += d
		}
	}
	return total
}
