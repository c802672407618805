package serve

import (
	"context"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/wire"
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
// every JournalBytes, and one at its end), not by how often it flushes. A display is
// never merged across: it ends the run before it. Each piece is handed to the cell's
// live readers once it is written (a display, bounded by the worker, only to them): a
// reader is shown only what the journal holds, in the order the cell made it.
//
// A write that fails ends the live output as not live, and the journal writes no more:
// its readers take the rest from the cell's record, which has it all.
//
// One goroutine, run's, makes every write.
type journal struct {
	record func(stream, text string) error // writes a piece of stdout or stderr to the store
	live   *liveOutput

	mu      sync.Mutex
	pending []wire.Output // stdout and stderr merged by stream between displays, in order
	size    int
	closing bool
	wake    chan struct{} // signalled when pending grows or closing is set; capacity 1
	done    chan struct{} // closed once everything is written

	failed bool // a write failed; run's alone
}

// startJournal starts the journal of the session's running cell.
func (s *Session) startJournal(cell string, live *liveOutput) *journal {
	ctx := context.WithoutCancel(s.d.runCtx) // written even as the cell is interrupted: its record keeps what it printed
	return newJournal(func(stream, text string) error {
		_, err := s.d.store.AppendOutput(ctx, s.StoreID(), cell, stream, text)
		if err != nil {
			s.d.log.Warn("recording a cell's output", "session", s.id, "execution", cell, "err", err)
		}
		return err
	}, live)
}

// newJournal starts a journal that writes with record and hands on to live.
func newJournal(record func(stream, text string) error, live *liveOutput) *journal {
	j := &journal{record: record, live: live, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go j.run()
	return j
}

// add takes a piece of the cell's output, to write at the end of its window.
func (j *journal) add(o wire.Output) {
	j.mu.Lock()
	if n := len(j.pending); n > 0 && j.pending[n-1].Stream == o.Stream && o.Stream != wire.StreamDisplay {
		j.pending[n-1].Text += o.Text
	} else {
		j.pending = append(j.pending, o)
	}
	j.size += len(o.Text)
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
		var runs []wire.Output
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

// write records runs in the store, and hands those recorded, and the displays among
// them, to the cell's live readers. Past a failed write it does neither.
func (j *journal) write(runs []wire.Output) {
	for _, r := range runs {
		if j.failed {
			return
		}
		if r.Stream != wire.StreamDisplay && j.record(r.Stream, r.Text) != nil {
			j.failed = true
			j.live.lose()
			return
		}
		j.live.add(r)
	}
}
