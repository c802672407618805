package program

import (
	"errors"
	"io"
	"sync"
	"time"
)

// Bounds on the replies the host holds for a child: those queued for fd 3 and the one
// being written. A child that sends calls and does not read their replies would
// otherwise make the host hold every reply.
const (
	// MaxRepliesQueued is how many replies may wait to be written before a binding
	// call waits to start.
	MaxRepliesQueued = MaxCallsInFlight
	// MaxReplyQueueBytes is how many bytes of replies may wait to be written before
	// a binding call waits to start. A reply larger than this on its own is replaced
	// by a rejection that says so.
	MaxReplyQueueBytes = 32 << 20
	// ReplyStall is how long the replies may stay past either bound with none of them
	// written, the child reading nothing, before the run ends as worker-exit: a child
	// that reads slowly is waited for, one that does not read is not.
	ReplyStall = 5 * time.Second
)

// errReplyQueue is a child that left its replies past the bounds, unread, for
// ReplyStall.
var errReplyQueue = errors.New("program: reply queue exceeded")

// An outbox is the queue of frames the host writes to a child's fd 3, and the one
// goroutine that writes them (run): nothing else writes fd 3, and no write happens
// while a lock is held. Boot and run frames are never refused; binding calls wait
// for room among the replies before they start (awaitRoom), and replies that stay past
// the bounds, unwritten, for the stall close stalled.
type outbox struct {
	w       io.Writer
	stall   time.Duration
	wake    chan struct{} // holds a token while there is something new to write or to stop for
	room    chan struct{} // holds a token once a reply was written
	stalled chan struct{} // closed once the replies stayed past the bounds, unwritten, for stall

	mu       sync.Mutex
	queue    []outFrame
	replies  int         // replies queued or being written
	bytes    int         // their bytes
	progress time.Time   // when the writer last wrote a piece, or began after idling
	watch    *time.Timer // while the replies are past the bounds: looks for a stall
	closed   bool
}

type outFrame struct {
	data  []byte
	reply bool
}

func newOutbox(w io.Writer, stall time.Duration) *outbox {
	return &outbox{w: w, stall: stall, wake: make(chan struct{}, 1), room: make(chan struct{}, 1),
		stalled: make(chan struct{}), progress: time.Now()}
}

// send queues a host frame (boot, run).
func (o *outbox) send(frame []byte) { o.put(outFrame{data: frame}) }

// reply queues a reply frame.
func (o *outbox) reply(frame []byte) { o.put(outFrame{data: frame, reply: true}) }

func (o *outbox) put(f outFrame) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return // settled: nothing more goes out
	}
	if len(o.queue) == 0 && o.replies == 0 {
		o.progress = time.Now() // the writer was idle: its wait starts now
	}
	if f.reply {
		o.replies++
		o.bytes += len(f.data)
		if o.fullLocked() && o.watch == nil {
			o.watch = time.AfterFunc(o.stall, o.check)
		}
	}
	o.queue = append(o.queue, f)
	o.mu.Unlock()
	signal(o.wake)
}

// fullLocked reports whether the replies waiting are at MaxRepliesQueued or
// MaxReplyQueueBytes; o.mu held.
func (o *outbox) fullLocked() bool {
	return o.replies >= MaxRepliesQueued || o.bytes >= MaxReplyQueueBytes
}

// check is the stall watch: it closes stalled if the replies are still past the
// bounds and nothing was written for the stall, else looks again when that could be.
func (o *outbox) check() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || !o.fullLocked() {
		o.watch = nil
		return
	}
	if left := o.stall - time.Since(o.progress); left > 0 {
		o.watch.Reset(left)
		return
	}
	o.watch = nil
	close(o.stalled)
}

// awaitRoom returns once the replies waiting are within MaxRepliesQueued and
// MaxReplyQueueBytes, errReplyQueue if they stalled past them first, or nil if stop
// closed first.
func (o *outbox) awaitRoom(stop <-chan struct{}) error {
	for {
		o.mu.Lock()
		full := o.fullLocked()
		o.mu.Unlock()
		if !full {
			return nil
		}
		select {
		case <-o.room:
		case <-o.stalled:
			return errReplyQueue
		case <-stop:
			return nil
		}
	}
}

// signal leaves a token in c, if it has none.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// close stops the writer once the frame it is writing, if any, is written or fails;
// the rest is dropped.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.queue = nil
	if o.watch != nil {
		o.watch.Stop()
		o.watch = nil
	}
	o.mu.Unlock()
	signal(o.wake)
}

// waiting returns the replies queued or being written, and their bytes.
func (o *outbox) waiting() (replies, bytes int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.replies, o.bytes
}

// run writes the queued frames in order until close or a failed write; it is the
// only writer of w.
func (o *outbox) run() {
	for {
		o.mu.Lock()
		for len(o.queue) == 0 && !o.closed {
			o.mu.Unlock()
			<-o.wake
			o.mu.Lock()
		}
		if o.closed {
			o.mu.Unlock()
			return
		}
		batch := o.queue
		o.queue = nil
		o.mu.Unlock()
		for i, f := range batch {
			batch[i] = outFrame{} // let the frame go once written
			err := o.write(f.data)
			o.mu.Lock()
			if f.reply {
				o.replies--
				o.bytes -= len(f.data)
			}
			stop := o.closed
			o.mu.Unlock()
			if f.reply {
				signal(o.room)
			}
			if err != nil {
				o.close() // the child's end is gone, or settlement closed ours
				return
			}
			if stop {
				return
			}
		}
	}
}

// writeChunk is how much of a frame the writer writes at a time: each piece written is
// progress, so a child that reads a large reply slowly is not taken for one that does
// not read.
const writeChunk = 256 << 10

// write writes data a chunk at a time, noting the progress.
func (o *outbox) write(data []byte) error {
	for len(data) > 0 {
		n := min(len(data), writeChunk)
		if _, err := o.w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
		o.mu.Lock()
		o.progress = time.Now()
		o.mu.Unlock()
	}
	return nil
}
