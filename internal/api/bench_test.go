package api_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/worker"
)

// workerPid is the pid of session sid's live worker, as its kernel.reset records it.
func workerPid(b *testing.B, d *daemon, sid string) int {
	resp, data := d.do("GET", "/v1/sessions/"+sid+"/events?follow=0", nil)
	d.want(resp, data, 200, nil)
	pid := 0
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e struct {
			Kind   string `json:"kind"`
			Record struct {
				Loaded struct {
					Pid int `json:"pid"`
				} `json:"loaded"`
			} `json:"record"`
		}
		if json.Unmarshal(line, &e, json.RejectUnknownMembers(false)) == nil && e.Kind == "kernel.reset" {
			pid = e.Record.Loaded.Pid
		}
	}
	if pid == 0 {
		b.Fatal("no worker pid in the events")
	}
	return pid
}

// BenchmarkHTTPExecute is POST /v1/sessions/s/executions of 1+1 on the Unix socket, to
// its 200 with the record (http): p50, p99, and the CPU per cell of the client, the
// daemon (one process here) and the worker together. Beside it, in the same run, the
// anchor it is held to (direct): 1+1 executed on a workbench worker of the same
// interpreter directly, with no daemon and no record.
func BenchmarkHTTPExecute(b *testing.B) {
	b.Run("http", func(b *testing.B) {
		benchExecute(b, `{"code":"1+1","wait_ms":10000}`, `"text":"2"`)
	})
	b.Run("direct", func(b *testing.B) {
		python, err := interp.Find(context.Background(), session.DefaultPython(os.Getenv))
		if err != nil {
			b.Skip(err)
		}
		w, err := worker.Start(context.Background(), worker.Config{Python: python.Path, SessionID: "s", Generation: "g-1"})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Shutdown(time.Second)
		m := perfstat.Start(w.Pid())
		n := 0
		for b.Loop() {
			n++
			start := time.Now()
			rec, err := w.Execute(context.Background(), "c-"+strconv.Itoa(n), "1+1")
			m.Add(time.Since(start))
			if err != nil || rec.Status != "ok" || rec.Output[0].Text != "2" {
				b.Fatalf("%v %+v", err, rec)
			}
		}
		m.Report(b, n)
	})
}

// benchExecute posts body as session s's next cell until b is done, checking that each
// answer is a 200 that contains want, and reports p50, p99 and CPU per cell.
func benchExecute(b *testing.B, body, want string) {
	d := startDaemon(b, kilndaemon.Options{})
	d.create("s")
	m := perfstat.Start(workerPid(b, d, "s"))
	n := 0
	var buf bytes.Buffer
	for b.Loop() {
		n++
		start := time.Now()
		req, _ := http.NewRequest("POST", d.base+"/v1/sessions/s/executions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := d.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		buf.ReadFrom(resp.Body)
		resp.Body.Close()
		m.Add(time.Since(start))
		if resp.StatusCode != 200 || !bytes.Contains(buf.Bytes(), []byte(want)) {
			b.Fatalf("%d %s", resp.StatusCode, buf.Bytes())
		}
	}
	m.Report(b, n)
}

// BenchmarkEventStream reads a session's whole event stream of about 1000 events
// (?follow=0) from the start: events a second, and the CPU per event.
func BenchmarkEventStream(b *testing.B) {
	d := startDaemon(b, kilndaemon.Options{})
	d.create("s")
	for range 4 { // each inspect is a request and a reply in the journal
		if _, rec := d.execute("s", "for _ in range(120):\n    await runtime.inspect()", 60000); rec.Status != "ok" {
			b.Fatalf("%+v", rec)
		}
	}
	m := perfstat.Start()
	events := 0
	var elapsed time.Duration
	for b.Loop() {
		start := time.Now()
		req, _ := http.NewRequestWithContext(context.Background(), "GET", d.base+"/v1/sessions/s/events?follow=0", nil)
		resp, err := d.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		n := bytes.Count(buf.Bytes(), []byte("\n"))
		elapsed += took
		events += n
		m.Add(took / time.Duration(n))
	}
	f := m.Figures(events)
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(f.P50, "p50-µs/event")
	b.ReportMetric(f.P99, "p99-µs/event")
	b.ReportMetric(f.CPU, "cpu-µs/event")
	b.ReportMetric(float64(events)/float64(b.N), "events/read")
}

// BenchmarkHTTPExecuteTinyFlushes is BenchmarkHTTPExecute of a cell that writes 4096
// bytes to stdout, flushing each: what the journal's writes of its output cost it.
func BenchmarkHTTPExecuteTinyFlushes(b *testing.B) {
	benchExecute(b, `{"code":"import sys\nfor _ in range(4096):\n    sys.stdout.write('x'); sys.stdout.flush()","wait_ms":60000}`,
		`"status":"ok"`)
}
