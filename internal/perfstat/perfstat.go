// Package perfstat measures round trips as kiln reports them: the median and 99th
// percentile of their latency, and the CPU each one cost every process involved (this
// one, and the workers named), never one figure without the others.
package perfstat

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

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
		if d, err := ProcessCPU(pid); err == nil {
			total += d
		}
	}
	return total
}

// ProcessCPU is the user and system time a live process has used, all its threads.
func ProcessCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("perfstat: %w", err)
	}
	// The command name, in parentheses, may hold spaces: fields are counted after it.
	end := bytes.LastIndexByte(stat, ')')
	fields := bytes.Fields(stat[end+1:])
	if end < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("perfstat: /proc/%d/stat: unexpected %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(string(fields[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("perfstat: /proc/%d/stat: unexpected %q", pid, stat)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}
