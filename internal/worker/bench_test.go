package worker

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/perfstat"
)

// BenchmarkStartToHello is one generation's start: spawn, connect, hello checked. It
// reports the median and the worker's resident set once idle.
func BenchmarkStartToHello(b *testing.B) {
	python, pkg := benchPython(b)
	samples := make([]time.Duration, 0, b.N)
	var rss float64
	for b.Loop() {
		start := time.Now()
		w, err := Start(context.Background(), Config{Python: python.Path, Package: pkg, SessionID: "bench", Generation: "g-1"})
		samples = append(samples, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		rss = residentMB(b, w.Pid())
		w.Shutdown(time.Second)
		b.StartTimer()
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(rss, "idle-RSS-MB")
}

// residentMB is a process's resident set, in MB. A worker that has said hello does
// nothing more until a frame comes: its resident set is settled.
func residentMB(b *testing.B, pid int) float64 {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// PaceCell is a cell whose result is the median time, in µs, of sum(range(1000)) in the
// worker, of 200: how fast the machine runs Python during a benchmark. On a shared
// virtual machine that changes from one minute to the next, and a round trip is best read
// beside it (the pace-µs metric).
const PaceCell = "import time; ts = sorted(-time.perf_counter_ns() + (sum(range(1000)), time.perf_counter_ns())[1] for _ in range(200)); ts[100] / 1000"

// BenchmarkExecute is a trivial cell, 1+1, from Execute to its record: the worker's own
// round trip, with no store behind it. It reports p50, p99 and the CPU per cell of the
// host and the worker together.
func BenchmarkExecute(b *testing.B) {
	w, reportPace := startPaced(b, Config{SessionID: "bench", Generation: "g-1"})
	defer reportPace()
	m := perfstat.Start(w.Pid())
	n := 0
	for b.Loop() {
		n++
		start := time.Now()
		rec, err := w.Execute(context.Background(), "b-"+strconv.Itoa(n), "1+1")
		m.Add(time.Since(start))
		if err != nil || rec.Status != "ok" || rec.Output[0].Text != "2" {
			b.Fatalf("%v %+v", err, rec)
		}
	}
	m.Report(b, n)
}

// startPaced starts a worker for a benchmark, shut down when it ends, and runs PaceCell
// in it; the function it returns reports the pace, and is to be called after the
// benchmark's loop, which clears metrics.
func startPaced(b *testing.B, cfg Config) (*Worker, func()) {
	w, err := Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Shutdown(time.Second) })
	rec, err := w.Execute(context.Background(), "pace", PaceCell)
	if err != nil || rec.Status != "ok" {
		b.Fatalf("%v %+v", err, rec)
	}
	pace, err := strconv.ParseFloat(rec.Output[0].Text, 64)
	if err != nil {
		b.Fatalf("pace %q: %v", rec.Output[0].Text, err)
	}
	return w, func() { b.ReportMetric(pace, "pace-µs") }
}

// BenchmarkInterrupt measures how long a running cell takes to end after its interrupt,
// for the kinds of cell an interrupt must stop cooperatively.
func BenchmarkInterrupt(b *testing.B) {
	python, err := interp.Find(context.Background(), "python3")
	if err != nil {
		b.Fatal(err)
	}
	w, err := Start(context.Background(), Config{Python: python.Path, SessionID: "bench", Generation: "g-1"})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Shutdown(time.Second)
	for _, c := range interruptCases {
		b.Run(strings.ReplaceAll(c.name, " ", "-"), func(b *testing.B) {
			samples := make([]time.Duration, 0, b.N)
			n := 0
			for b.Loop() {
				n++
				id := "b-" + strconv.Itoa(n)
				done := startReady(b, w, id, c.code)
				sent := time.Now()
				w.Interrupt(id)
				rec := <-done
				samples = append(samples, time.Since(sent))
				if rec.Status != "interrupted" || rec.NamespaceLost {
					b.Fatalf("%s: %+v", c.name, rec)
				}
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "max-ms")
		})
	}
}
