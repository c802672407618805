package program

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
)

// median returns the median of samples, which it sorts.
func median(samples []time.Duration) time.Duration {
	slices.Sort(samples)
	return samples[len(samples)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile returns the p-th percentile of samples, which it sorts.
func percentile(samples []time.Duration, p int) time.Duration {
	slices.Sort(samples)
	return samples[min(len(samples)-1, len(samples)*p/100)]
}

// cpuSoFar is the user and system time of this process and of its children reaped so far.
func cpuSoFar() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

// reportRuns reports the p50 and p99 of samples and cpu, each in ms, as name-p50-ms,
// name-p99-ms and name-cpu-ms/op.
func reportRuns(b *testing.B, name string, samples []time.Duration, cpu time.Duration) {
	b.ReportMetric(ms(percentile(samples, 50)), name+"-p50-ms")
	b.ReportMetric(ms(percentile(samples, 99)), name+"-p99-ms")
	b.ReportMetric(ms(cpu), name+"-cpu-ms/op")
}

// BenchmarkColdReturn1 runs "return 1" in a child started for it, and alternates with
// a bare `python3 -I -c pass` of the same interpreter, the baseline the cold run is held
// to (at most 1.5 times it): the p50, p99 and CPU of each (the cold run's CPU is the
// host's and its child's), and the ratio of the medians.
func BenchmarkColdReturn1(b *testing.B) {
	r := newRunner(b, Options{Precompile: true})
	p := Program{Source: "return 1"}
	var cold, bare []time.Duration
	var bareCPU time.Duration
	cpu0 := cpuSoFar()
	for b.Loop() {
		cmd := exec.Command(pythonPath, "-I", "-c", "pass")
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, time.Since(start))
		bareCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		start = time.Now()
		res, err := r.Run(context.Background(), p)
		cold = append(cold, time.Since(start))
		if err != nil || res.Status != StatusOK {
			b.Fatalf("%v %+v", err, res)
		}
	}
	r.Close() // every child reaped: their CPU is the children's
	n := time.Duration(len(cold))
	reportRuns(b, "cold", cold, (cpuSoFar()-cpu0-bareCPU)/n)
	reportRuns(b, "bare-python", bare, bareCPU/n)
	b.ReportMetric(float64(percentile(cold, 50))/float64(percentile(bare, 50)), "cold/bare-p50")
}

// BenchmarkWarmReturn1 runs "return 1" on a child from the warm pool: from Run to its
// result, the pool refilled (untimed) between runs. Its CPU per run is the host's and
// every child's, the pool's boots included.
func BenchmarkWarmReturn1(b *testing.B) {
	r := newRunner(b, Options{Pool: 2, Precompile: true})
	p := Program{Source: "return 1"}
	ctx := context.Background()
	var samples []time.Duration
	cpu0 := cpuSoFar()
	for b.Loop() {
		b.StopTimer()
		if err := r.Warm(ctx, p); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		res, err := r.Run(ctx, p)
		samples = append(samples, time.Since(start))
		if err != nil || res.Status != StatusOK {
			b.Fatalf("%v %+v", err, res)
		}
	}
	r.Close()
	reportRuns(b, "warm", samples, (cpuSoFar()-cpu0)/time.Duration(len(samples)))
}

// BenchmarkBindingRoundTrip makes b.N binding calls, one after another, from one
// program; a round trip is the time between two calls reaching the host: the reply
// going out, the program resuming, and its next call coming in.
func BenchmarkBindingRoundTrip(b *testing.B) {
	r := newRunner(b, Options{Precompile: true})
	var mu sync.Mutex
	var stamps []time.Time
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"tick": func(_ context.Context, v lossless.Value) (lossless.Value, error) {
			mu.Lock()
			stamps = append(stamps, time.Now())
			mu.Unlock()
			return v, nil
		},
	}}
	src := fmt.Sprintf("for i in range(%d):\n    await tools.tick(i)\nreturn 1", b.N+1)
	b.ResetTimer()
	res, err := r.Run(context.Background(), Program{Source: src, Namespaces: []Namespace{ns}, Limits: Limits{CPUSeconds: 600}})
	if err != nil || res.Status != StatusOK {
		b.Fatalf("%v %+v", err, res)
	}
	var rt []time.Duration
	for i := 1; i < len(stamps); i++ {
		rt = append(rt, stamps[i].Sub(stamps[i-1]))
	}
	if len(rt) > 0 {
		b.ReportMetric(float64(median(rt))/float64(time.Microsecond), "median-round-trip-µs")
	}
}

// codecValue is a binding argument or reply of about 1 MB: records with strings,
// escapes, non-ASCII text, integers, fractions and nesting.
func codecValue() lossless.Value {
	var records lossless.Array
	for i := range 4000 {
		records = append(records, lossless.NewObject(
			lossless.Member{Key: "id", Value: lossless.Number(i)},
			lossless.Member{Key: "name", Value: lossless.String(fmt.Sprintf("user-%d", i))},
			lossless.Member{Key: "score", Value: lossless.Number(float64(i) * 0.37)},
			lossless.Member{Key: "tags", Value: lossless.Array{lossless.String("alpha"), lossless.String("γάμμα")}},
			lossless.Member{Key: "bio", Value: lossless.String(strings.Repeat("Line with \"quotes\", a tab\t and é.\n", 3))},
			lossless.Member{Key: "geo", Value: lossless.NewObject(lossless.Member{Key: "lat", Value: lossless.Number(48.8566)})},
		))
	}
	return records
}

// BenchmarkCodec measures the frame codec's throughput: a call frame read and rebuilt
// by ParseChildFrame (cap, UTF-8, unsafe-integer scan, decode, validation), and a
// reply frame written by AppendReply.
func BenchmarkCodec(b *testing.B) {
	v := codecValue()
	call := append(lossless.Encode(lossless.NewObject(
		lossless.Member{Key: "type", Value: lossless.String("call")},
		lossless.Member{Key: "id", Value: lossless.Number(0)},
		lossless.Member{Key: "global", Value: lossless.String("tools")},
		lossless.Member{Key: "name", Value: lossless.String("search")},
		lossless.Member{Key: "args", Value: v},
	)), '\n')
	b.Run("parse-call", func(b *testing.B) {
		b.SetBytes(int64(len(call)))
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := ParseChildFrame(call[:len(call)-1]); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
		}
		b.ReportMetric(float64(len(call))/median(samples).Seconds()/1e6, "median-MB/s")
	})
	b.Run("encode-reply", func(b *testing.B) {
		var buf []byte
		b.SetBytes(int64(len(AppendReply(nil, Reply{OK: true, Value: v}))))
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			buf = AppendReply(buf[:0], Reply{ID: 7, OK: true, Value: v})
			samples = append(samples, time.Since(start))
		}
		b.ReportMetric(float64(len(buf))/median(samples).Seconds()/1e6, "median-MB/s")
	})
}
