package api_test

import (
	"context"
	"fmt"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/perfstat"
)

// BenchmarkCellsBesideIdleStreams runs trivial cells from 8 clients, each on a
// session of its own, while 0, 10, 100 or 250 event streams follow other, idle
// sessions: cells a second, p50 and p99 of a cell, and the CPU per cell of the daemon
// and the workers together. A commit should cost the same however many streams wait
// on sessions it does not touch. Run it with a fixed count, -benchtime=400x: each run of
// the function starts a daemon and its workers.
func BenchmarkCellsBesideIdleStreams(b *testing.B) {
	const clients = 8
	for _, idle := range []int{0, 10, 100, 250} {
		b.Run(fmt.Sprintf("idle=%d", idle), func(b *testing.B) {
			d := startDaemon(b, kilndaemon.Options{})
			var pids []int
			for i := range clients {
				sid := fmt.Sprintf("c%d", i)
				d.create(sid)
				if _, rec := d.execute(sid, "1+1", 10000); rec.Status != "ok" {
					b.Fatalf("%+v", rec)
				}
				pids = append(pids, workerPid(b, d, sid))
			}
			stop := openIdleStreams(b, d, idle)
			defer stop()

			var next atomic.Int32
			var mu sync.Mutex
			var lat []time.Duration
			m := perfstat.Start(pids...)
			b.SetParallelism((clients + 1) / 2) // GOMAXPROCS 2 on the machines measured
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				sid := fmt.Sprintf("c%d", int(next.Add(1)-1)%clients)
				var mine []time.Duration
				for pb.Next() {
					t0 := time.Now()
					req, _ := http.NewRequest("POST", d.base+"/v1/sessions/"+sid+"/executions",
						strings.NewReader(`{"code":"1+1","wait_ms":10000}`))
					req.Header.Set("Content-Type", "application/json")
					resp, err := d.client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !strings.Contains(string(body), `"text":"2"`) {
						b.Errorf("%d %s", resp.StatusCode, body)
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			for _, l := range lat {
				m.Add(l)
			}
			cells := len(lat)
			m.Report(b, cells)
			b.ReportMetric(float64(cells)/elapsed.Seconds(), "cells/s")
		})
	}
}

// openIdleStreams opens n event streams that follow sessions no cell runs on, spread
// over up to 10 of them, and returns what closes them. Each is open once its headers
// have come.
func openIdleStreams(b *testing.B, d *daemon, n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sessions := min(n, 10)
	for i := range sessions {
		d.create(fmt.Sprintf("idle%d", i))
	}
	for i := range n {
		req, _ := http.NewRequestWithContext(ctx, "GET", d.base+fmt.Sprintf("/v1/sessions/idle%d/events", i%sessions), nil)
		resp, err := d.client.Do(req)
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		if resp.StatusCode != 200 {
			cancel()
			b.Fatalf("stream %d: status %d", i, resp.StatusCode)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
