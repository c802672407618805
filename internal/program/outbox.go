package program

import (
	"errors"
	"io"
	"sync"
)

// Bounds on the replies the host holds for a child: those queued for fd 3 and the one
// being written. A child that sends calls and does not read their replies would
// otherwise make the host hold every reply; past either bound the run ends as
// worker-exit.
const (
	// MaxRepliesQueued is how many replies may wait to be written.
	MaxRepliesQueued = MaxCallsInFlight
	// MaxReplyQueueBytes is how many bytes of replies may wait to be written. A reply
	// larger than this on its own is replaced by a rejection that says so.
	MaxReplyQueueBytes = 32 << 20
)

// errReplyQueue is a reply that would take the outbox past MaxRepliesQueued or
// MaxReplyQueueBytes.
var errReplyQueue = errors.New("program: reply queue exceeded")

// An outbox is the queue of frames the host writes to a child's fd 3, and the one
// goroutine that writes them (run): nothing else writes fd 3, and no write happens
// while a lock is held. Boot and run frames are never refused; replies are bounded.
type outbox struct {
	w    io.Writer
	wake chan struct{} // holds a token while there is something new to write or to stop for

	mu      sync.Mutex
	queue   []outFrame
	replies int // replies queued or being written
	bytes   int // their bytes
	closed  bool
}

type outFrame struct {
	data  []byte
	reply bool
}

func newOutbox(w io.Writer) *outbox {
	return &outbox{w: w, wake: make(chan struct{}, 1)}
}

// send queues a host frame (boot, run).
func (o *outbox) send(frame []byte) { o.put(outFrame{data: frame}) }

// reply queues a reply frame, or returns errReplyQueue if it would take the replies
// waiting past MaxRepliesQueued or MaxReplyQueueBytes.
func (o *outbox) reply(frame []byte) error {
	return o.put(outFrame{data: frame, reply: true})
}

func (o *outbox) put(f outFrame) error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil // settled: nothing more goes out
	}
	if f.reply {
		if o.replies+1 > MaxRepliesQueued || o.bytes+len(f.data) > MaxReplyQueueBytes {
			o.mu.Unlock()
			return errReplyQueue
		}
		o.replies++
		o.bytes += len(f.data)
	}
	o.queue = append(o.queue, f)
	o.mu.Unlock()
	o.signal()
	return nil
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// close stops the writer once the frame it is writing, if any, is written or fails;
// the rest is dropped.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.queue = nil
	o.mu.Unlock()
	o.signal()
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
		for _, f := range batch {
			_, err := o.w.Write(f.data)
			o.mu.Lock()
			if f.reply {
				o.replies--
				o.bytes -= len(f.data)
			}
			stop := o.closed
			o.mu.Unlock()
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
