package worker

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/sandbox"
	kilnpy "github.com/kilnrt/kiln/python"
)

// BenchmarkSandbox is the A/B of confinement, in one run: a generation's start to its
// hello, and a trivial cell, under none and under workspace. Start's CPU counts the
// host and its reaped children (the helper and python); a cell's, the host and the
// worker.
func BenchmarkSandbox(b *testing.B) {
	python, pkg := benchPython(b)
	host := sandboxHost()
	config := func(b *testing.B, profile string) Config {
		return Config{Python: python.Path, Package: pkg, SessionID: "bench", Generation: "g-1", Dir: b.TempDir(),
			Sandbox: sandbox.Policy{Profile: sandbox.Profile{Name: profile}}, SandboxHost: host}
	}
	for _, profile := range []string{sandbox.ProfileNone, sandbox.ProfileWorkspace} {
		b.Run("start/"+profile, func(b *testing.B) {
			cfg := config(b, profile)
			m := perfstat.Start()
			cpu0 := childrenCPU()
			n := 0
			for b.Loop() {
				start := time.Now()
				w, err := Start(context.Background(), cfg)
				m.Add(time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				w.Shutdown(time.Second)
				n++
			}
			f := m.Figures(n)
			b.ReportMetric(f.P50, "p50-µs")
			b.ReportMetric(f.P99, "p99-µs")
			b.ReportMetric(f.CPU+float64((childrenCPU()-cpu0).Microseconds())/float64(n), "cpu-µs/op")
		})
		b.Run("cell/"+profile, func(b *testing.B) {
			w, err := Start(context.Background(), config(b, profile))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Shutdown(time.Second)
			m := perfstat.Start(w.Pid())
			n := 0
			for b.Loop() {
				start := time.Now()
				if _, err := w.Execute(context.Background(), "c-"+strconv.Itoa(n), "x = 1"); err != nil {
					b.Fatal(err)
				}
				m.Add(time.Since(start))
				n++
			}
			m.Report(b, n)
		})
	}
}

// benchPython is the interpreter benchmarks start, and the worker's package compiled
// for it.
func benchPython(b *testing.B) (interp.Interpreter, *kilnpy.Installer) {
	// The interpreter itself, not a launcher script before it, whose start is not kiln's.
	exe, err := exec.Command("python3", "-I", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		b.Fatal(err)
	}
	python, err := interp.Find(context.Background(), strings.TrimSpace(string(exe)))
	if err != nil {
		b.Fatal(err)
	}
	pkg, err := kilnpy.Precompiled(context.Background(), python.Path, "kiln.worker")
	if err != nil {
		b.Fatal(err)
	}
	return python, pkg
}

// childrenCPU is the user and system time of this process's reaped children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
