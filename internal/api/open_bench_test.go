package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/zygote"
)

// BenchmarkOpenToFirstResult opens sessions over the Unix socket and runs 1+1 in each,
// n at once (1, 8, 64), their workbenches forked from a zygote and, A/B, spawned: from POST /v1/sessions to the 200 of its first execution, p50
// and p99 of every session, and the CPU per session of the daemon and its workers
// (those reaped once the sessions are stopped, their stop included). Beside it, in the
// same run, the same number of bare starts of the sessions' interpreter
// (python -I -c pass), n at once: the anchor a session's open is held to.
func BenchmarkOpenToFirstResult(b *testing.B) {
	python, err := interp.Find(context.Background(), session.DefaultPython(func(string) string { return "" }))
	if err != nil {
		b.Skip(err)
	}
	for _, n := range []int{1, 8, 64} {
		for _, start := range []string{sandbox.StartForked, sandbox.StartSpawned} {
			b.Run(start+"-sessions-"+strconv.Itoa(n), func(b *testing.B) {
				if start == sandbox.StartSpawned {
					b.Setenv(zygote.Env, zygote.Off)
				}
				benchmarkOpens(b, python.Path, n)
			})
		}
		b.Run("bare-python-"+strconv.Itoa(n), func(b *testing.B) {
			measureAtOnce(b, n, func(int) {
				if err := exec.Command(python.Path, "-I", "-c", "pass").Run(); err != nil {
					b.Error(err)
				}
			}, func() {})
		})
	}
}

// benchmarkOpens measures opens to a first result, n at once, on a daemon of python
// that has opened one session before (its package compiled, its zygote started).
func benchmarkOpens(b *testing.B, python string, n int) {
	d := startDaemon(b, kilndaemon.Options{Python: python})
	d.mustPost(b, "/v1/sessions", `{"id":"warm"}`, 201, "")
	d.mustPost(b, "/v1/sessions/warm/executions", `{"code":"1+1","wait_ms":60000}`, 200, `"text":"2"`)
	round := 0
	measureAtOnce(b, n, func(i int) {
		id := fmt.Sprintf("o-%d-%d", round, i)
		d.mustPost(b, "/v1/sessions", `{"id":"`+id+`"}`, 201, "")
		d.mustPost(b, "/v1/sessions/"+id+"/executions", `{"code":"1+1","wait_ms":60000}`, 200, `"text":"2"`)
	}, func() {
		for i := range n {
			req, _ := http.NewRequest("DELETE", d.base+"/v1/sessions/"+fmt.Sprintf("o-%d-%d", round, i), nil)
			if resp, err := d.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		round++
	})
}

// measureAtOnce runs op(0..n-1) at once until b is done, then settle, and reports the
// p50 and p99 of every op and the CPU per op, this process's and its reaped children's.
func measureAtOnce(b *testing.B, n int, op func(i int), settle func()) {
	var (
		mu      sync.Mutex
		samples []time.Duration
	)
	self0, kids0 := cpuUse()
	ops := 0
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				start := time.Now()
				op(i)
				d := time.Since(start)
				mu.Lock()
				samples = append(samples, d)
				mu.Unlock()
			})
		}
		wg.Wait()
		settle()
		ops += n
	}
	slices.Sort(samples)
	at := func(p int) float64 {
		return float64(samples[min(len(samples)-1, len(samples)*p/100)].Microseconds()) / 1000
	}
	b.ReportMetric(at(50), "p50-ms")
	b.ReportMetric(at(99), "p99-ms")
	self, kids := cpuUse()
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(ops) }
	b.ReportMetric(perOp(self-self0+kids-kids0), "cpu-ms/op")
	b.ReportMetric(perOp(self-self0), "self-cpu-ms/op")
}

// cpuUse is the user and system time of this process (the daemon and the client) and
// of its reaped children (the workers).
func cpuUse() (self, kids time.Duration) {
	var s, k syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &k)
	return time.Duration(s.Utime.Nano() + s.Stime.Nano()), time.Duration(k.Utime.Nano() + k.Stime.Nano())
}

// mustPost posts body to path and fails b unless the answer has status and contains
// want.
func (d *daemon) mustPost(b testing.TB, path, body string, status int, want string) {
	req, _ := http.NewRequest("POST", d.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status || !bytes.Contains(buf.Bytes(), []byte(want)) {
		b.Errorf("POST %s: %d %s", path, resp.StatusCode, buf.Bytes())
	}
}
