package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/serve"
	"github.com/kilnrt/kiln/internal/store"
)

// journaled is the output of the cell with execution id eid as the session's events
// carry it: one entry a row of the store, each written by its own transaction.
func journaled(t *testing.T, d *daemon, eid string) (rows int, stdout, stderr string) {
	t.Helper()
	_, evs := readAll(t, d)
	for _, e := range evs {
		if e.Kind != store.KindOutput {
			continue
		}
		var c store.OutputChunk
		if err := json.Unmarshal(e.Record, &c, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		if c.CellID != eid {
			continue
		}
		if c.Index != rows {
			t.Fatalf("%s's chunk %d after %d chunks", eid, c.Index, rows)
		}
		rows++
		switch c.Stream {
		case "stdout":
			stdout += c.Text
		case "stderr":
			stderr += c.Text
		}
	}
	return rows, stdout, stderr
}

// TestManyTinyFlushesMakeFewJournalWrites runs cells that flush one byte at a time, up
// to the cell's output bound and one past it: the journal writes them a window at a
// time, so its rows are bounded by the cell's duration and size, not by its flushes,
// and together they are exactly the record's output.
func TestManyTinyFlushesMakeFewJournalWrites(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("s")
	// Cells of n bytes: n-1 to stdout, one byte at a time, then one to stderr; at the
	// bound the stderr byte is kept, one past it, it is counted.
	for _, n := range []int{store.MaxOutputBytes, store.MaxOutputBytes + 1} {
		code := fmt.Sprintf("import sys\nw, f = sys.stdout.write, sys.stdout.flush\n"+
			"for _ in range(%d):\n    w('x'); f()\nsys.stderr.write('e'); sys.stderr.flush()", n-1)
		_, rec := d.execute("s", code, 300000)
		resp, data := d.do("GET", "/v1/executions/"+rec.ID, nil)
		var end struct {
			record
			TruncatedBytes int64     `json:"truncated_bytes"`
			StartedAt      time.Time `json:"started_at"`
			EndedAt        time.Time `json:"ended_at"`
		}
		d.want(resp, data, 200, &end)
		took := end.EndedAt.Sub(end.StartedAt)
		rows, stdout, stderr := journaled(t, d, rec.ID)
		t.Logf("%d one-byte flushes: %d rows in %s", n, rows, took)

		wantOut, wantErr, truncated := strings.Repeat("x", n-1), "e", int64(0)
		if n > store.MaxOutputBytes {
			wantErr, truncated = "", int64(n-store.MaxOutputBytes)
		}
		gotOut, gotErr := end.streams()
		if end.Status != "ok" || end.TruncatedBytes != truncated || gotOut != wantOut || gotErr != wantErr {
			t.Fatalf("record: status %s, truncated %d, %d bytes of stdout, stderr %q; want ok, %d, %d, %q", end.Status,
				end.TruncatedBytes, len(gotOut), gotErr, truncated, len(wantOut), wantErr)
		}
		if stdout != wantOut || stderr != wantErr {
			t.Fatalf("journal: %d bytes of stdout, stderr %q; want the record's %d, %q", len(stdout), stderr, len(wantOut), wantErr)
		}
		most := 2 + int(took/serve.JournalWindow) + store.MaxOutputBytes/serve.JournalBytes
		if rows > most {
			t.Fatalf("%d rows for a cell of %s; want at most %d (a window of %s or %d bytes each)",
				rows, took, most, serve.JournalWindow, serve.JournalBytes)
		}
	}
}
