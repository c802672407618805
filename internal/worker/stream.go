package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/wire"
)

// stream is what a running cell has streamed (kiln's "output" and "display" frames), in
// the order it came: its chunks merged by stream between displays, and its displays,
// held to the cell's output and display bounds; and those not yet handed to the caller.
// Worker.mu guards it.
type stream struct {
	records []wire.Output     // as the worker's ledger keeps them, each display with its data
	size    int               // the text's bytes
	texts   int               // the text records
	deliver func(wire.Output) // nil: chunks are only checked
	pending []wire.Output     // chunks deliver has not had yet
	// displays counts the cell's Display messages, and displaySize their values' bytes.
	displays     int
	displaySize  int
	displayDrops int64
	wake         chan struct{} // signalled when pending grows; capacity 1
}

func newStream(deliver func(wire.Output)) *stream {
	return &stream{deliver: deliver, wake: make(chan struct{}, 1)}
}

// add takes one chunk, or says how it breaks the cell's bounds.
func (s *stream) add(m wire.OutputChunk) error {
	if m.Text == "" {
		return errors.New("an empty output chunk")
	}
	if s.size += len(m.Text); s.size > wire.MaxOutputBytes {
		return fmt.Errorf("streamed output totals more than %d bytes", wire.MaxOutputBytes)
	}
	if n := len(s.records); n > 0 && s.records[n-1].Stream == m.Stream {
		s.records[n-1].Text += m.Text
	} else if s.texts == wire.MaxOutputRecords {
		return fmt.Errorf("streamed output makes more than %d records", wire.MaxOutputRecords)
	} else {
		s.records = append(s.records, wire.Output{Stream: m.Stream, Text: m.Text})
		s.texts++
	}
	s.queue(wire.Output{Stream: m.Stream, Text: m.Text})
	return nil
}

// addDisplay takes one display, or says how it breaks the cell's display bounds.
func (s *stream) addDisplay(m wire.Display) error {
	if s.displays == wire.MaxDisplayItems {
		return fmt.Errorf("more than %d displays", wire.MaxDisplayItems)
	}
	for _, v := range m.Data {
		s.displaySize += len(v)
	}
	if s.displaySize > wire.MaxDisplayBytes {
		return fmt.Errorf("display data totals more than %d bytes", wire.MaxDisplayBytes)
	}
	s.displays++
	s.displayDrops += m.Dropped
	o := wire.Output{Stream: wire.StreamDisplay, Data: m.Data}
	s.records = append(s.records, o)
	s.queue(o)
	return nil
}

// queue hands o to deliver's caller, when there is one.
func (s *stream) queue(o wire.Output) {
	if s.deliver == nil {
		return
	}
	s.pending = append(s.pending, o)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// display takes a display of the running cell.
func (w *Worker) display(m wire.Display) error {
	return w.toCell("display", m.ExecutionID, func(s *stream) error { return s.addDisplay(m) })
}

// errNotStreamed is a completion whose output disagrees with the cell's stream.
var errNotStreamed = errors.New("its output is not what the cell streamed")

// fill checks a completion's output against what was streamed, and returns it as the
// record keeps it, in place: each display's place filled with the display streamed there.
//
// The completion's stdout and stderr records, its result records set aside, must be
// exactly the streamed records, and its display places exactly where the displays came:
// the record is what the caller saw, nothing more or less, in the order the cell made
// it. A text record is never empty, and a streamed record is split only by result
// records (text a thread wrote after the final value): nothing the caller did not see.
func (s *stream) fill(output []wire.Output) ([]wire.Output, error) {
	next := 0  // the streamed record to match next
	rest := "" // what of the streamed record being matched is not yet matched
	for i, o := range output {
		switch {
		case o.Stream == wire.StreamResult:
			continue
		case o.Stream != wire.StreamDisplay && o.Text == "":
			return nil, errNotStreamed
		case rest != "" && i > 0 && output[i-1].Stream == wire.StreamResult && o.Stream == s.records[next-1].Stream:
			// more of the same streamed record, after a result record
		case rest != "" || next == len(s.records) || s.records[next].Stream != o.Stream:
			return nil, errNotStreamed
		case o.Stream == wire.StreamDisplay:
			output[i] = s.records[next]
			next++
			continue
		default:
			rest = s.records[next].Text
			next++
		}
		if !strings.HasPrefix(rest, o.Text) {
			return nil, errNotStreamed
		}
		rest = rest[len(o.Text):]
	}
	if rest != "" || next != len(s.records) {
		return nil, errNotStreamed
	}
	return output, nil
}

// output takes a chunk of the running cell's output.
func (w *Worker) output(m wire.OutputChunk) error {
	return w.toCell("output", m.ExecutionID, func(s *stream) error { return s.add(m) })
}

// toCell hands what the worker sent for cell id, a message of kind kind, to the cell's
// stream, which must be the running cell's.
func (w *Worker) toCell(kind, id string, add func(*stream) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.op == nil || w.op.id != id || w.op.stream == nil {
		return fmt.Errorf("%s for %q, which is not a running cell", kind, id)
	}
	if err := add(w.op.stream); err != nil {
		return fmt.Errorf("%s for %q: %w", kind, id, err)
	}
	return nil
}

// deliver hands the chunks streamed so far to the caller, on the caller's goroutine.
func (w *Worker) deliver(op *operation) {
	w.mu.Lock()
	chunks := op.stream.pending
	op.stream.pending = nil
	w.mu.Unlock()
	for _, c := range chunks {
		op.stream.deliver(c)
	}
}

// RawTail is the end of what went to the worker's real stdout or stderr during a cell —
// os.write(1, …), a child process's output, a C library's prints — at most
// proc.TailSize bytes, invalid UTF-8 replaced.
type RawTail struct {
	Text string `json:"text"`
	// DroppedBytes counts the earlier bytes not kept.
	DroppedBytes int64 `json:"dropped_bytes"`
}

// rawSink receives one of the worker process's raw output pipes: it keeps the
// generation's diagnostic tail, and the running cell's tail.
type rawSink struct {
	generation *proc.Tail

	mu      sync.Mutex
	running bool       // a cell runs
	cell    *proc.Tail // its tail, made at its first raw byte
}

func newRawSink() *rawSink { return &rawSink{generation: proc.NewTail(proc.TailSize)} }

// Write keeps p in both tails. It never fails.
func (s *rawSink) Write(p []byte) (int, error) {
	s.generation.Write(p)
	s.mu.Lock()
	if s.running && s.cell == nil {
		s.cell = proc.NewTail(proc.TailSize)
	}
	cell := s.cell
	s.mu.Unlock()
	if cell != nil {
		cell.Write(p)
	}
	return len(p), nil
}

// begin starts a cell's tail.
func (s *rawSink) begin() {
	s.mu.Lock()
	s.running, s.cell = true, nil
	s.mu.Unlock()
}

// end ends the cell's tail and returns it, or nil if the cell wrote nothing raw.
func (s *rawSink) end() *RawTail {
	s.mu.Lock()
	cell := s.cell
	s.running, s.cell = false, nil
	s.mu.Unlock()
	if cell == nil {
		return nil
	}
	data, dropped := cell.Bytes(), cell.Dropped()
	if len(data) == 0 && dropped == 0 {
		return nil
	}
	text := string(data)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return &RawTail{Text: text, DroppedBytes: dropped}
}

// rawTails ends the cell's raw tails, once what the worker wrote before now is read.
// The wait is short: the pipes' copiers only read and keep (a rawSink never blocks).
func (w *Worker) rawTails() (stdout, stderr *RawTail) {
	w.proc.Flush(context.Background())
	return w.rawOut.end(), w.rawErr.end()
}
