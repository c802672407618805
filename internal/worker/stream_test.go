package worker

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/wire"
)

// TestOutputStreamsWhileTheCellRuns holds the cell at a host request until the chunk it
// printed before the request has reached the caller: the chunk cannot have come with
// the completion.
func TestOutputStreamsWhileTheCellRuns(t *testing.T) {
	seen := make(chan struct{})
	w := startWorker(t, Config{Handler: HandlerFunc(func(ctx context.Context, call Call) wire.Reply {
		select {
		case <-seen:
		case <-ctx.Done():
		}
		return wire.Reply{Kind: wire.ReplyOK}
	})})
	var got []wire.Output
	rec, err := w.ExecuteStream(context.Background(), "c-1",
		"import sys\nprint('before')\nprint('err', file=sys.stderr)\nawait runtime.request('hold')\nprint('after')\n7",
		func(o wire.Output) {
			got = append(got, o)
			if len(got) == 2 {
				close(seen)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Output{{Stream: "stdout", Text: "before\n"}, {Stream: "stderr", Text: "err\n"}, {Stream: "stdout", Text: "after\n"}}
	if len(got) != len(want) {
		t.Fatalf("got chunks %q; want %q", got, want)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("chunk %d: got %q; want %q", i, got[i], want[i])
		}
	}
	if rec.Status != wire.StatusOK || len(rec.Output) != 4 || !reflect.DeepEqual(rec.Output[3], wire.Output{Stream: "result", Text: "7"}) {
		t.Errorf("got %s %q; want ok, the chunks and the result", rec.Status, rec.Output)
	}
}

// TestStreamedOutputIsTheRecord floods and truncates: the chunks handed over, merged by
// stream, are the record's stdout and stderr.
func TestStreamedOutputIsTheRecord(t *testing.T) {
	w := startWorker(t, Config{})
	for i, code := range []string{
		"import sys\nfor i in range(20000):\n    print(i)\n    print(-i, file=sys.stderr)",
		"print('x' * 200000)",
	} {
		var sb strings.Builder
		chunks := 0
		rec, err := w.ExecuteStream(context.Background(), "c-"+string(rune('1'+i)), code, func(o wire.Output) {
			chunks++
			sb.WriteString(o.Stream + ":" + o.Text)
		})
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		for _, o := range rec.Output {
			want.WriteString(o.Stream + ":" + o.Text)
		}
		if rec.Status != wire.StatusOK || chunks == 0 || merge(sb.String()) != merge(want.String()) {
			t.Errorf("%q: got %s, %d chunks; the chunks are not the record", code, rec.Status, chunks)
		}
	}
}

// merge is a chunk log with each "stream:" prefix that repeats the one before removed,
// so that chunks and records compare.
func merge(log string) string {
	var b strings.Builder
	last := ""
	for _, line := range strings.SplitAfter(log, "\n") {
		stream, text, ok := strings.Cut(line, ":")
		if ok && (stream == "stdout" || stream == "stderr") {
			if stream != last {
				b.WriteString("[" + stream + "]")
				last = stream
			}
			b.WriteString(text)
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// TestForgedOutputEndsTheGeneration: cell code that writes an output frame of its own
// makes the completion disagree with what was streamed; the generation ends for it.
func TestForgedOutputEndsTheGeneration(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-1", `import gc
from kiln import wire
worker = next(o for o in gc.get_objects() if type(o).__name__ == "Worker")
worker._write(wire.pack_frame(wire.encode("test", "g-1", wire.OUTPUT,
    {"execution_id": "c-1", "stream": "stdout", "text": "forged"})))`)
	if rec.Status != StatusFailed || !rec.NamespaceLost || !strings.Contains(errText(rec), "not what the cell streamed") {
		t.Errorf("got %s %q; want failed, the stream named", rec.Status, errText(rec))
	}
	if len(rec.Output) != 1 || rec.Output[0].Text != "forged" {
		t.Errorf("got output %q; want what was streamed", rec.Output)
	}
}

// TestOutputForAnotherCellEndsTheGeneration is a chunk naming a cell that is not running.
func TestOutputForAnotherCellEndsTheGeneration(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-1", `import gc
from kiln import wire
worker = next(o for o in gc.get_objects() if type(o).__name__ == "Worker")
worker._write(wire.pack_frame(wire.encode("test", "g-1", wire.OUTPUT,
    {"execution_id": "c-0", "stream": "stdout", "text": "x"})))
import time; time.sleep(30)`)
	if rec.Status != StatusFailed || !strings.Contains(errText(rec), `output for "c-0", which is not a running cell`) {
		t.Errorf("got %s %q; want failed, the chunk named", rec.Status, errText(rec))
	}
}

// TestExceptionInParts: a failed cell's record says what it raised.
func TestExceptionInParts(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-1", "raise KeyError('k')")
	if rec.Exception == nil || rec.Exception.Type != "KeyError" || rec.Exception.Value != "'k'" ||
		rec.Exception.Traceback != errText(rec) {
		t.Errorf("got %+v (error %q); want KeyError 'k' and the traceback", rec.Exception, errText(rec))
	}
	if rec := execute(t, w, "c-2", "1"); rec.Exception != nil {
		t.Errorf("an ok cell: got exception %+v; want none", rec.Exception)
	}
}

// TestRawOutputTails: what a cell writes to the real descriptors, itself or through a
// child, is in its record, bounded; the next cell starts with empty tails.
func TestRawOutputTails(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-1", `import os, subprocess
os.write(1, b"raw out\n")
os.write(2, b"raw err\n")
subprocess.run(["echo", "from echo"])
os.system("echo from system >&2")`)
	if rec.RawStdout == nil || rec.RawStdout.Text != "raw out\nfrom echo\n" {
		t.Errorf("raw stdout: got %+v", rec.RawStdout)
	}
	if rec.RawStderr == nil || rec.RawStderr.Text != "raw err\nfrom system\n" {
		t.Errorf("raw stderr: got %+v", rec.RawStderr)
	}
	if rec := execute(t, w, "c-2", "1"); rec.RawStdout != nil || rec.RawStderr != nil {
		t.Errorf("a quiet cell: got %+v %+v; want no tails", rec.RawStdout, rec.RawStderr)
	}
	if rec := execute(t, w, "c-3", "import os\nos.write(1, b'a' * 8192)"); rec.RawStdout == nil ||
		len(rec.RawStdout.Text) != 8192 || rec.RawStdout.DroppedBytes != 0 {
		t.Errorf("at the tail's size: got %+v", rec.RawStdout)
	}
	rec = execute(t, w, "c-4", "import os\nos.write(1, b'a' * 8192)\nos.write(1, b'\\xffb')")
	if rec.RawStdout == nil || rec.RawStdout.Text != strings.Repeat("a", 8190)+"\uFFFDb" || rec.RawStdout.DroppedBytes != 2 {
		t.Errorf("past the tail: got %d bytes, %d dropped", len(rec.RawStdout.Text), rec.RawStdout.DroppedBytes)
	}
}

// TestForkedChildrensPrintsAreInTheRawTails: what a child that cell code forked prints
// (os.fork, a default multiprocessing pool) is in the cell's raw tails, flushed or not.
func TestForkedChildrensPrintsAreInTheRawTails(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-1", `import os, sys
pid = os.fork()
if pid == 0:
    print("child out")
    print("child err", file=sys.stderr)
    os._exit(0)
os.waitpid(pid, 0)
print("parent")`)
	if rec.Status != wire.StatusOK || rec.RawStdout == nil || rec.RawStdout.Text != "child out\n" ||
		rec.RawStderr == nil || rec.RawStderr.Text != "child err\n" {
		t.Fatalf("os.fork: got %s, raw %v %v, %q", rec.Status, rec.RawStdout, rec.RawStderr, errText(rec))
	}
	if len(rec.Output) != 1 || rec.Output[0].Text != "parent\n" {
		t.Errorf("os.fork: output %v; want the parent's print alone", rec.Output)
	}
	rec = execute(t, w, "c-2", `import multiprocessing, sys
def shout(n):  # one write a line: the pool's two processes print at once
    sys.stdout.write(f"worker {n}\n")
    sys.stdout.flush()
with multiprocessing.get_context("fork").Pool(2) as pool:
    pool.map(shout, [1, 2])`)
	if rec.Status != wire.StatusOK || rec.RawStdout == nil || !strings.Contains(rec.RawStdout.Text, "worker 1\n") ||
		!strings.Contains(rec.RawStdout.Text, "worker 2\n") {
		t.Errorf("a pool: got %s, raw %v, %q", rec.Status, rec.RawStdout, errText(rec))
	}
}

// TestAForgedCompletionFailsNoLaterCell: cell code that sends a completion of its own
// cell ends that cell's turn early (the host cannot tell the forgery), but the worker's
// own completion that follows is dropped, and the cell the host sends next runs once the
// forging cell has ended, in the same namespace.
func TestAForgedCompletionFailsNoLaterCell(t *testing.T) {
	w := startWorker(t, Config{})
	execute(t, w, "c-1", "x = 41")
	execute(t, w, "c-2", `import gc, time
from kiln import wire
worker = next(o for o in gc.get_objects() if type(o).__name__ == "Worker")
worker._send(wire.COMPLETED, {"id": "c-2", "result": {"kind": "cell", "status": "ok", "output": [],
    "truncated_bytes": 0, "error": None}})
time.sleep(0.2)
x += 1`)
	if rec := execute(t, w, "c-3", "x"); rec.Status != wire.StatusOK || rec.Generation != "g-1" ||
		len(rec.Output) != 1 || rec.Output[0].Text != "42" {
		t.Fatalf("c-3: got %s in %s %v %q; want 42 in g-1", rec.Status, rec.Generation, rec.Output, errText(rec))
	}
	if rec := execute(t, w, "c-4", "x + 1"); rec.Status != wire.StatusOK || rec.Generation != "g-1" {
		t.Errorf("c-4: got %s in %s %q; want ok in g-1", rec.Status, rec.Generation, errText(rec))
	}
}
