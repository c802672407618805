package serve

import (
	"context"
	"sync"

	"github.com/kilnrt/kiln/internal/wire"
)

// MaxLiveOutputBytes bounds the output a running execution keeps for its readers, as a
// cell's record is bounded (65536 bytes); what comes past it is counted, not kept.
const MaxLiveOutputBytes = 65536

// Chunk is a piece of a running cell's output, as it came: stdout or stderr text, or
// a display's MIME bundle.
type Chunk struct {
	Index  int               `json:"index"`
	Stream string            `json:"stream"` // "stdout", "stderr" or "display"
	Text   string            `json:"text,omitempty"`
	Data   map[string]string `json:"data,omitempty"` // a display's bundle, image types base64
}

// liveOutput is what a running execution has printed, for readers that follow it. Its
// text is bounded here; its displays are bounded by the worker (wire.MaxDisplayItems,
// wire.MaxDisplayBytes), as the record's are.
type liveOutput struct {
	mu      sync.Mutex
	chunks  []Chunk
	bytes   int
	dropped int64
	changed chan struct{} // closed at the next chunk or at the end
	ended   bool
	lost    bool // ended early: its readers were not shown all of it
}

func newLiveOutput() *liveOutput { return &liveOutput{changed: make(chan struct{})} }

// add keeps a chunk, within the bound.
func (o *liveOutput) add(out wire.Output) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return
	}
	if o.bytes+len(out.Text) > MaxLiveOutputBytes {
		o.dropped += int64(len(out.Text))
		return
	}
	o.bytes += len(out.Text)
	o.chunks = append(o.chunks, Chunk{Index: len(o.chunks), Stream: out.Stream, Text: out.Text, Data: out.Data})
	close(o.changed)
	o.changed = make(chan struct{})
}

// end wakes every reader for the last time.
func (o *liveOutput) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endLocked()
}

func (o *liveOutput) endLocked() {
	if !o.ended {
		o.ended = true
		close(o.changed)
	}
}

// lose ends the output as not live: what comes next is only in the cell's record.
func (o *liveOutput) lose() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.lost = true
	}
	o.endLocked()
}

// Output returns the chunks of x's output from index from on, waiting until there is
// one, the cell ends, or ctx ends. ended says no more will come; dropped counts the
// bytes past MaxLiveOutputBytes. An execution not running has no live output: it is
// ended at once, and its output is its record's.
func (x *Execution) Output(ctx context.Context, from int) (chunks []Chunk, ended bool, dropped int64, err error) {
	o := x.live
	if o == nil {
		return nil, true, 0, nil
	}
	for {
		o.mu.Lock()
		if from < len(o.chunks) || o.ended {
			chunks = append(chunks, o.chunks[min(from, len(o.chunks)):]...)
			ended, dropped = o.ended, o.dropped
			o.mu.Unlock()
			return chunks, ended, dropped, nil
		}
		wait := o.changed
		o.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, 0, ctx.Err()
		}
	}
}

// Live says x's readers are shown, as it comes, all the output it makes: false for a
// handle of a cell that had ended, and for a cell whose output could not all be
// written as it came. Its readers take what they were not shown from its record.
func (x *Execution) Live() bool {
	if x.live == nil {
		return false
	}
	x.live.mu.Lock()
	defer x.live.mu.Unlock()
	return !x.live.lost
}
