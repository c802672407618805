package store

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/perfstat"
)

// BenchmarkBacklogAppend is the A/B of the backlog's two file formats, in one run: an
// answered request appended to a mapped file (a copy into shared memory, then one
// aligned store of its header) against the same bytes appended by one write(2). Neither
// syncs: both survive the death of the process, neither a power loss. The queue is
// emptied every 4096 records, as folds empty it.
func BenchmarkBacklogAppend(b *testing.B) {
	for _, mapped := range []bool{true, false} {
		b.Run(map[bool]string{true: "mapped", false: "write"}[mapped], func(b *testing.B) {
			bl := &backlog{dir: b.TempDir(), mapped: mapped}
			defer bl.close()
			m := perfstat.Start()
			i := 0
			for b.Loop() {
				i++
				start := time.Now()
				if _, err := bl.append(queued{req: answeredRequest(1, i), reply: okReply(i)}); err != nil {
					b.Fatal(err)
				}
				m.Add(time.Since(start))
				if i%4096 == 0 {
					bl.folded(len(bl.queue))
				}
			}
			m.Report(b, i)
		})
	}
}

// A file in the append format reads back whole, and a last record cut short by its
// writer's death ends the records without an error.
func TestAppendFormatReadsBack(t *testing.T) {
	b := &backlog{dir: t.TempDir()}
	for i := 1; i <= 3; i++ {
		if _, err := b.append(queued{req: answeredRequest(1, i), reply: okReply(i)}); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(b.current.path)
	b.close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(appendMagic)) {
		t.Fatalf("a file in the append format begins %q", data[:8])
	}
	records, end, err := parseBacklog(data, 0)
	if err != nil || len(records) != 3 || end != int64(len(data)) {
		t.Fatalf("read %d records to %d of %d bytes, %v; want 3 to the end", len(records), end, len(data), err)
	}
	if records[2].RequestID != "r-3" {
		t.Errorf("the last record is %+v", records[2])
	}
	cut := data[:len(data)-3]
	records, end2, err := parseBacklog(cut, 0)
	if err != nil || len(records) != 2 || end2 >= int64(len(cut)) {
		t.Fatalf("a cut file: %d records to %d of %d bytes, %v; want 2 and no error", len(records), end2, len(cut), err)
	}
}
