package kiln_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/perfstat"
)

func open(t testing.TB) *kiln.Workbench {
	t.Helper()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	return wb
}

func TestOpenWorkbenchWithACancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v; want context.Canceled", err)
	}
	if wb != nil {
		wb.Close()
	}
}

func TestKilledWorkerIsReplacedByANewGeneration(t *testing.T) {
	// The cell reads its pid from the host's /proc, which a sandbox replaces: it runs
	// unconfined.
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{Sandbox: kiln.SandboxNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	ctx := context.Background()
	if _, err := wb.Execute(ctx, "x = 1"); err != nil {
		t.Fatal(err)
	}
	// The worker's pid as the host numbers it: /proc is the host's, os.getpid() numbers
	// it in the worker's own PID namespace.
	pidRec, _ := wb.Execute(ctx, "import os\nint(os.readlink('/proc/self'))")
	pid, _ := strconv.Atoi(pidRec.Output[0].Text)
	done, sleeping := make(chan kiln.Record, 1), make(chan struct{})
	go func() {
		rec, _ := wb.ExecuteStream(ctx, "import time\nprint('sleeping', flush=True)\ntime.sleep(100)", func(_ string, out kiln.Output) {
			if out.Text == "sleeping\n" {
				close(sleeping)
			}
		})
		done <- rec
	}()
	select {
	case <-sleeping:
	case rec := <-done:
		t.Fatalf("the cell ended before it slept: %+v", rec)
	}
	p, _ := os.FindProcess(pid)
	p.Kill()
	rec := <-done
	if rec.Status != kiln.StatusFailed || !rec.NamespaceLost || rec.Generation != "g-1" {
		t.Fatalf("got %+v; want a failed record of g-1 with the namespace lost", rec)
	}
	next, err := wb.Execute(ctx, "'x' in globals()")
	if err != nil {
		t.Fatal(err)
	}
	if next.Generation != "g-2" || next.Output[0].Text != "False" {
		t.Errorf("next cell: %+v; want g-2 with a fresh namespace", next)
	}
}

func TestClosedWorkbenchRefuses(t *testing.T) {
	t.Parallel()
	wb := open(t)
	wb.Close()
	if _, err := wb.Execute(context.Background(), "1"); err != kiln.ErrClosed {
		t.Errorf("got %v; want ErrClosed", err)
	}
}

// paceCell's result is the median time, in µs, of sum(range(1000)) in the worker, of 200:
// how fast the machine runs Python during a benchmark, reported beside it as pace-µs (see
// internal/worker's PaceCell).
const paceCell = "import time; ts = sorted(-time.perf_counter_ns() + (sum(range(1000)), time.perf_counter_ns())[1] for _ in range(200)); ts[100] / 1000"

// pace runs paceCell in wb and returns a function that reports its result, to be called
// after the benchmark's loop, which clears metrics.
func pace(b *testing.B, wb *kiln.Workbench) func() {
	rec, err := wb.Execute(context.Background(), paceCell)
	if err != nil || rec.Status != kiln.StatusOK {
		b.Fatalf("%v %+v", err, rec)
	}
	v, err := strconv.ParseFloat(rec.Output[0].Text, 64)
	if err != nil {
		b.Fatal(err)
	}
	return func() { b.ReportMetric(v, "pace-µs") }
}

// workerPid is the pid of wb's current worker as the host numbers it.
func workerPid(b *testing.B, wb *kiln.Workbench) int {
	rec, err := wb.Execute(context.Background(), pidCell)
	if err != nil || rec.Status != kiln.StatusOK || len(rec.Output) != 1 {
		b.Fatalf("%v %+v", err, rec)
	}
	return hostPid(b, rec.Output[0].Text)
}

// pidCell prints the worker's PID namespace and its pid there, for hostPid: inside
// its namespace a worker's os.getpid() is not the host's number for it.
const pidCell = "import os\nprint(os.readlink('/proc/self/ns/pid'), os.getpid())"

// hostPid finds the process that printed out with pidCell in the host's /proc: the
// one in that PID namespace whose innermost NSpid is that pid.
func hostPid(b *testing.B, out string) int {
	ns, inner, _ := strings.Cut(strings.TrimSpace(out), " ")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || link != ns {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(status)) {
			ids, ok := strings.CutPrefix(line, "NSpid:")
			if f := strings.Fields(ids); ok && len(f) > 0 && f[len(f)-1] == inner {
				return pid
			}
		}
	}
	b.Fatalf("no process of the host printed %q", out)
	return 0
}

// BenchmarkRoundTrip is a trivial cell, 1+1, from Execute to its record, in a durable
// record: p50, p99, and the CPU per cell of the host and its worker together.
func BenchmarkRoundTrip(b *testing.B) {
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer wb.Close()
	ctx := context.Background()
	defer pace(b, wb)()
	m := perfstat.Start(workerPid(b, wb))
	n := 0
	for b.Loop() {
		n++
		start := time.Now()
		rec, err := wb.Execute(ctx, "1+1")
		m.Add(time.Since(start))
		if err != nil || rec.Output[0].Text != "2" {
			b.Fatalf("%v %+v", err, rec)
		}
	}
	m.Report(b, n)
}

// BenchmarkPrint10MB is a cell printing 10 MB, bounded to 64 KiB on the way back.
func BenchmarkPrint10MB(b *testing.B) {
	wb := open(b)
	ctx := context.Background()
	for b.Loop() {
		rec, err := wb.Execute(ctx, "print('x' * 10_000_000)")
		if err != nil || rec.TruncatedBytes != 10_000_001-65536 {
			b.Fatalf("%v %+v", err, rec.TruncatedBytes)
		}
	}
}

func TestHundredCellsOfAHundredRequests(t *testing.T) {
	t.Parallel()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	code := "n = 0\nfor _ in range(100):\n    n += (await runtime.inspect())['requests_made'] > 0\nn"
	for i := range 100 {
		rec, err := wb.Execute(context.Background(), code)
		if err != nil || rec.Status != kiln.StatusOK || rec.Output[0].Text != "100" {
			t.Fatalf("cell %d: %v %+v", i+1, err, rec)
		}
	}
}

func TestASessionContinuesInANewGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	opts := kiln.WorkbenchOptions{DataDir: dir, SessionID: "agent"}
	for i, want := range []string{"g-1 c-1", "g-2 c-2"} {
		wb, err := kiln.OpenWorkbench(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := wb.Execute(ctx, "1")
		wb.Close()
		if err != nil || rec.Generation+" "+rec.ID != want {
			t.Errorf("process %d: got %s %s (%v); want %s", i+1, rec.Generation, rec.ID, err, want)
		}
	}
}

func TestAWorkerClaimingAYieldItWasNotGrantedIsAnError(t *testing.T) {
	wb := open(t)
	rec, err := wb.Execute(context.Background(), "from kiln.runtime import Yielded\nraise Yielded({})")
	if err != nil || rec.Status != kiln.StatusError {
		t.Errorf("got %v %s; want error", err, rec.Status)
	}
}

// BenchmarkHostRequest is one host-request round trip from a cell: await
// runtime.inspect(), recorded durably (request and reply committed) before the reply.
func BenchmarkHostRequest(b *testing.B) {
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer wb.Close()
	ctx := context.Background()
	defer pace(b, wb)()
	// Each cell times 100 round trips itself; the cap is per cell.
	m := perfstat.Start(workerPid(b, wb))
	n := 0
	for b.Loop() {
		n++
		rec, err := wb.Execute(ctx, `import time
ts = []
for _ in range(100):
    t0 = time.perf_counter_ns()
    await runtime.inspect()
    ts.append(time.perf_counter_ns() - t0)
" ".join(map(str, ts))`)
		if err != nil || rec.Status != kiln.StatusOK {
			b.Fatalf("%v %+v", err, rec)
		}
		for f := range strings.FieldsSeq(strings.Trim(rec.Output[0].Text, "'")) {
			ns, _ := strconv.Atoi(f)
			m.Add(time.Duration(ns))
		}
	}
	m.Report(b, 100*n)
}
