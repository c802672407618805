package storetests

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/pgtest"
)

// clients are the numbers of clients of BenchmarkCellsOverDaemonsOnPostgres, each
// client with a session of its own, spread over the daemons.
var benchClients = []int{8, 64}

// BenchmarkCellsOverDaemonsOnPostgres: a trivial cell (1+1) through the HTTP API, from
// 8 and from 64 clients at once, their sessions spread over one and over two kiln serve
// daemons sharing one PostgreSQL database (Unix socket, fsync=off). It reports cells/s,
// each cell's p50 and p99, and the CPU a cell cost the daemons, their workers, the
// server's backends and the clients.
func BenchmarkCellsOverDaemonsOnPostgres(b *testing.B) {
	srv := pgtest.Start(b)
	for _, clients := range benchClients {
		for _, daemons := range []int{1, 2} {
			b.Run(fmt.Sprintf("clients=%d/daemons=%d", clients, daemons), func(b *testing.B) {
				cellsOverDaemons(b, srv, clients, daemons)
			})
		}
	}
}

// cellsOverDaemons is one run of BenchmarkCellsOverDaemonsOnPostgres.
func cellsOverDaemons(b *testing.B, srv *pgtest.Server, clients, daemons int) {
	url := srv.Database(b, fmt.Sprint(b.Name(), "-", b.N)) // a record per run: b.N=1 runs first
	var ds []*clitest.Served
	for range daemons {
		ds = append(ds, clitest.StartServe(b, clitest.ShortTemp(b), "--store", url, "--lease-ttl", "15s"))
	}
	var pids []int
	for _, d := range ds {
		pids = append(pids, d.Cmd.Process.Pid)
	}
	for i := range clients {
		ds[i%daemons].Call("POST", "/v1/sessions", `{"id":"b`+strconv.Itoa(i)+`"}`, 201, nil)
	}
	for _, d := range ds { // the workers, and the zygotes they fork from
		pids = append(pids, clitest.Descendants(d.Cmd.Process.Pid)...)
	}
	pids = append(pids, pgtest.Backends(b, url)...)
	latencies := make([][]time.Duration, clients)
	var failed sync.Once
	var failure error
	m := perfstat.Start(pids...)
	start := time.Now()
	n := b.N
	var wg sync.WaitGroup
	for i := range clients {
		d, sid := ds[i%daemons], "b"+strconv.Itoa(i)
		cells := n / clients
		if i < n%clients {
			cells++
		}
		wg.Go(func() {
			for range cells {
				t0 := time.Now()
				status, data := d.Do("POST", "/v1/sessions/"+sid+"/executions", `{"code":"1+1"}`)
				latencies[i] = append(latencies[i], time.Since(t0))
				var rec clitest.ExecRecord
				if status != 200 || json.Unmarshal(data, &rec, json.RejectUnknownMembers(false)) != nil ||
					len(rec.Output) != 1 || rec.Output[0].Text != "2" {
					failed.Do(func() { failure = fmt.Errorf("a cell of %s: %d %s", sid, status, data) })
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if failure != nil {
		b.Fatal(failure)
	}
	for _, ls := range latencies {
		for _, l := range ls {
			m.Add(l)
		}
	}
	m.Report(b, n)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "cells/s")
}
