package serve

import (
	"context"
	"sync"
)

// MaxLiveOutputBytes bounds the output a running execution keeps for its readers, as a
// cell's record is bounded (65536 bytes); what comes past it is counted, not kept.
const MaxLiveOutputBytes = 65536

// Chunk is a piece of a running cell's output, as it came.
type Chunk struct {
	Index  int    `json:"index"`
	Stream string `json:"stream"` // "stdout" or "stderr"
	Text   string `json:"text"`
}

// liveOutput is what a running execution has printed, for readers that follow it.
type liveOutput struct {
	mu      sync.Mutex
	chunks  []Chunk
	bytes   int
	dropped int64
	changed chan struct{} // closed at the next chunk or at the end
	ended   bool
}

func newLiveOutput() *liveOutput { return &liveOutput{changed: make(chan struct{})} }

// add keeps a chunk, within the bound.
func (o *liveOutput) add(stream, text string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return
	}
	if o.bytes+len(text) > MaxLiveOutputBytes {
		o.dropped += int64(len(text))
		return
	}
	o.bytes += len(text)
	o.chunks = append(o.chunks, Chunk{Index: len(o.chunks), Stream: stream, Text: text})
	close(o.changed)
	o.changed = make(chan struct{})
}

// end wakes every reader for the last time.
func (o *liveOutput) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.ended = true
		close(o.changed)
	}
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

// Live says x is a running cell's handle, whose output its readers follow as it comes.
func (x *Execution) Live() bool { return x.live != nil }
