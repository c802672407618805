package serve

import (
	"context"
	"sync"
	"time"
)

// JournalWindow is how often, at most, a running cell's output is written to the store
// once a write has been made: the runtime's own streaming window (50 ms). Output that
// comes after a quiet window is written at once.
const JournalWindow = 50 * time.Millisecond

// JournalBytes is how much output waiting for its window is written without waiting
// more: the runtime's own streaming size (8 KiB).
const JournalBytes = 8192

// journal writes a running cell's stdout and stderr to the store, a window at a time:
// what comes within one window is merged by stream and written together, so the
// writes of a cell are bounded by its duration and size (at most one a window, one
// every JournalBytes, and one at its end), not by how often it flushes. Each piece is
// handed to the cell's live readers once it is written: a reader is shown only what the
// journal holds.
//
// One goroutine, run's, makes every write.
type journal struct {
	s    *Session
	cell string
	live *liveOutput

	mu      sync.Mutex
	pending []run // merged by stream, in order
	size    int
	closing bool
	wake    chan struct{} // signalled when pending grows or closing is set; capacity 1
	done    chan struct{} // closed once everything is written
}

// run is output of one stream waiting to be written.
type run struct {
	stream string
	text   []byte
}

// startJournal starts the journal of the session's running cell.
func (s *Session) startJournal(cell string, live *liveOutput) *journal {
	j := &journal{s: s, cell: cell, live: live, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go j.run()
	return j
}

// add takes a piece of the cell's output, to write at the end of its window.
func (j *journal) add(stream, text string) {
	j.mu.Lock()
	if n := len(j.pending); n > 0 && j.pending[n-1].stream == stream {
		j.pending[n-1].text = append(j.pending[n-1].text, text...)
	} else {
		j.pending = append(j.pending, run{stream: stream, text: []byte(text)})
	}
	j.size += len(text)
	j.mu.Unlock()
	j.signal()
}

func (j *journal) signal() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// close writes what is waiting, at once, and returns once all is written. The cell's
// end must be recorded after it: the store takes output only of a running cell.
func (j *journal) close() {
	j.mu.Lock()
	j.closing = true
	j.mu.Unlock()
	j.signal()
	<-j.done
}

// run makes the journal's writes until it is closed with nothing waiting.
func (j *journal) run() {
	defer close(j.done)
	window := time.NewTimer(0)
	defer window.Stop()
	var last time.Time // of the last write; zero before the first
	for {
		j.mu.Lock()
		waiting, closing := len(j.pending) > 0, j.closing
		due := waiting && (closing || j.size >= JournalBytes || time.Since(last) >= JournalWindow)
		var runs []run
		if due {
			runs, j.pending, j.size = j.pending, nil, 0
		}
		j.mu.Unlock()
		switch {
		case due:
			last = time.Now()
			j.write(runs)
			continue
		case closing:
			return
		}
		var expired <-chan time.Time
		if waiting {
			window.Reset(JournalWindow - time.Since(last))
			expired = window.C
		}
		select {
		case <-j.wake:
		case <-expired:
		}
	}
}

// write records runs in the store, and hands those recorded to the cell's live readers. They are
// recorded even as the cell is interrupted: its record keeps what it printed meanwhile.
func (j *journal) write(runs []run) {
	ctx := context.WithoutCancel(j.s.d.runCtx)
	for _, r := range runs {
		text := string(r.text)
		if _, err := j.s.d.store.AppendOutput(ctx, j.s.StoreID(), j.cell, r.stream, text); err != nil {
			j.s.d.log.Warn("recording a cell's output", "session", j.s.id, "execution", j.cell, "err", err)
			continue // the cell's record, at its end, has it
		}
		j.live.add(r.stream, text)
	}
}
