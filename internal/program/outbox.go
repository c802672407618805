package program

import (
	"errors"
	"io"
	"sync"
	"time"
)

// Bounds on the replies the host holds for a child: those queued for fd 3, the one
// being written, and those of the binding calls running, reserved before each call
// starts. A child that sends calls and does not read their replies would otherwise
// make the host hold every reply.
const (
	// MaxRepliesQueued is how many replies may be reserved, queued or being written
	// before a binding call waits to start.
	MaxRepliesQueued = MaxCallsInFlight
	// MaxReplyQueueBytes is how many bytes of replies may be reserved, queued or being
	// written before a binding call waits to start: a call reserves its reply's bytes
	// before it starts, so that calls started together cannot together pass the bound.
	// A reply larger than this on its own is replaced by a rejection that says so.
	MaxReplyQueueBytes = 32 << 20
	// ReplyStall is how long a call may wait for room while replies that hold half of
	// it or more stay queued and none of them is written, the child reading nothing,
	// before the run ends as worker-exit: a child that reads slowly is waited for, one
	// that does not read is not.
	ReplyStall = 5 * time.Second
)

// errReplyQueue is a child that left its replies past the bounds, unread, for
// ReplyStall.
var errReplyQueue = errors.New("program: reply queue exceeded")

// An outbox is the queue of frames the host writes to a child's fd 3, and the one
// goroutine that writes them (run): nothing else writes fd 3, and no write happens
// while a lock is held. Boot and run frames are never refused; binding calls reserve
// room for their replies before they start (reserve), and a call that waits for room
// while the replies queued stay unwritten for the stall closes stalled.
type outbox struct {
	w       io.Writer
	stall   time.Duration
	wake    chan struct{} // holds a token while there is something new to write or to stop for
	room    chan struct{} // closed, and replaced, once a reply was written or room given back
	stalled chan struct{} // closed once a call waited for room while nothing was written for stall

	mu       sync.Mutex
	queue    []outFrame
	replies  int         // replies reserved, queued or being written
	bytes    int         // their bytes
	pending  int         // bytes of the replies queued or being written
	queued   int         // those replies
	waiters  int         // calls waiting in reserve
	growers  int         // calls waiting to grow their reservation
	progress time.Time   // when the writer last wrote a piece, or began after idling
	watch    *time.Timer // while a call waits for room: looks for a stall
	closed   bool
}

type outFrame struct {
	data  []byte
	reply bool
}

func newOutbox(w io.Writer, stall time.Duration) *outbox {
	return &outbox{w: w, stall: stall, wake: make(chan struct{}, 1), room: make(chan struct{}),
		stalled: make(chan struct{}), progress: time.Now()}
}

// send queues a host frame (boot, run).
func (o *outbox) send(frame []byte) { o.put(outFrame{data: frame}, 0) }

// reply queues a reply frame in place of the reservation of reserved bytes its call
// made. A frame larger than its reservation is queued all the same: grow first.
func (o *outbox) reply(frame []byte, reserved int) {
	o.put(outFrame{data: frame, reply: true}, reserved)
}

func (o *outbox) put(f outFrame, reserved int) {
	o.mu.Lock()
	if o.closed {
		if f.reply { // its reservation with it
			o.replies--
			o.bytes -= reserved
		}
		o.mu.Unlock()
		return // settled: nothing more goes out
	}
	if len(o.queue) == 0 && o.pending == 0 {
		o.progress = time.Now() // the writer was idle: its wait starts now
	}
	if f.reply {
		o.bytes += len(f.data) - reserved
		o.pending += len(f.data)
		o.queued++
		if len(f.data) < reserved {
			o.roomLocked() // it reserved more than it took
		}
	}
	o.queue = append(o.queue, f)
	o.mu.Unlock()
	signal(o.wake)
}

// reserve takes room for one reply of n bytes, waiting while the replies reserved,
// queued or being written are at MaxRepliesQueued, or would pass MaxReplyQueueBytes
// with n, unless nothing else holds any room: one reply alone is always let in. It
// returns errReplyQueue if the replies queued stayed unwritten for the stall while it
// waited, or errStopped if stop closed first.
func (o *outbox) reserve(n int, stop <-chan struct{}) error { return o.take(n, false, stop) }

// take is reserve, for a call that grows its reservation (growing) or one that starts:
// while a call waits to grow, none starts, so that the room a growing call gave back is
// not taken by new calls, each holding a result of its own.
func (o *outbox) take(n int, growing bool, stop <-chan struct{}) error {
	o.mu.Lock()
	counted := false
	if growing {
		o.growers++
	}
	defer func() {
		if counted {
			o.waiters--
		}
		if growing {
			o.growers--
			o.roomLocked() // a call may start now
		}
		o.mu.Unlock()
	}()
	for {
		if o.replies == 0 || (growing || o.growers == 0) && o.replies < MaxRepliesQueued && o.bytes+n <= MaxReplyQueueBytes {
			o.replies++
			o.bytes += n
			return nil
		}
		if !counted {
			counted = true
			o.waiters++
			if o.watch == nil {
				o.watch = time.AfterFunc(o.stall, o.check)
			}
		}
		room := o.room
		o.mu.Unlock()
		var err error
		select {
		case <-room:
		case <-o.stalled:
			err = errReplyQueue
		case <-stop:
			err = errStopped
		}
		o.mu.Lock()
		if err != nil {
			return err
		}
	}
}

// roomLocked wakes every call waiting for room. o.mu held.
func (o *outbox) roomLocked() {
	close(o.room)
	o.room = make(chan struct{})
}

// errStopped is a reservation given up because its run settled.
var errStopped = errors.New("program: run settled")

// grow makes a reservation of reserved bytes one of n, waiting as reserve does; on an
// error the reservation is gone.
func (o *outbox) grow(reserved, n int, stop <-chan struct{}) error {
	if n <= reserved {
		return nil
	}
	o.release(reserved)
	return o.take(n, true, stop)
}

// release gives back a reservation of n bytes whose call queued no reply.
func (o *outbox) release(n int) {
	o.mu.Lock()
	o.replies--
	o.bytes -= n
	o.roomLocked()
	o.mu.Unlock()
}

// backedUpLocked reports whether replies are queued or being written and they hold all
// the room held, or half the room or more, of bytes or of replies: then it is the child
// not reading them, not the calls running, that keeps a call waiting. o.mu held.
func (o *outbox) backedUpLocked() bool {
	return o.pending > 0 && (o.bytes == o.pending || o.pending >= MaxReplyQueueBytes/2 || o.queued >= MaxRepliesQueued/2)
}

// check is the stall watch: it closes stalled if a call still waits for room, the
// replies queued hold half of it, and nothing was written for the stall, else looks
// again when that could be.
func (o *outbox) check() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.waiters == 0 {
		o.watch = nil
		return
	}
	left := o.stall - time.Since(o.progress)
	if !o.backedUpLocked() || left > 0 {
		o.watch.Reset(max(left, o.stall/4)) // calls running hold the room: look again later
		return
	}
	o.watch = nil
	close(o.stalled)
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
				o.pending -= len(f.data)
				o.queued--
				o.roomLocked()
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
