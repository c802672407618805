package worker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/wire"
)

// maxOutboxBytes bounds the frames queued for a worker and not yet written. A worker
// that leaves this much unread (at most 128 replies a cell of up to 1 MiB each, and the
// frames of the host) has stopped reading: its generation ends.
const maxOutboxBytes = 160 << 20

// errOutboxFull is a frame that would take the queue past maxOutboxBytes.
var errOutboxFull = errors.New("worker: the worker leaves its socket unread")

// outgoing is one frame waiting for the writer.
type outgoing struct {
	frame []byte
	kind  string
	// patient frames (host replies) wait for a busy cell to read them, however long;
	// others are written within writeTimeout.
	patient bool
	written chan error // nil, or told the outcome of the write
}

// outbox is the queue between the goroutines that send frames and the one that writes
// them. Pushing never waits: a goroutine holding a lock, or the reader, may push.
type outbox struct {
	mu      sync.Mutex
	queue   []outgoing
	bytes   int
	closed  bool
	pending chan struct{} // holds a token while the queue may be non-empty
}

func newOutbox() *outbox { return &outbox{pending: make(chan struct{}, 1)} }

// push queues o; it refuses a frame past maxOutboxBytes, and any after close.
func (b *outbox) push(o outgoing) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return ErrDead
	case b.bytes+len(o.frame) > maxOutboxBytes:
		return fmt.Errorf("%w: %d bytes queued, and a %s frame of %d more", errOutboxFull, b.bytes, o.kind, len(o.frame))
	}
	b.queue = append(b.queue, o)
	b.bytes += len(o.frame)
	select {
	case b.pending <- struct{}{}:
	default:
	}
	return nil
}

// take removes and returns what is queued, oldest first; nil when nothing is.
func (b *outbox) take() []outgoing {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue, b.bytes = nil, 0
	return q
}

// close refuses every later push and returns what was queued, unwritten.
func (b *outbox) close() []outgoing {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	q := b.queue
	b.queue, b.bytes = nil, 0
	return q
}

// write is the one goroutine that writes the worker's socket: it writes what is queued,
// in order, until the generation ends or a write fails, which ends it.
func (w *Worker) write() {
	defer func() {
		for _, o := range w.out.close() {
			if o.written != nil {
				o.written <- ErrDead
			}
		}
	}()
	var deadline bool // conn has a write deadline set
	for {
		select {
		case <-w.out.pending:
		case <-w.dead:
			return
		}
		for _, o := range w.out.take() {
			var err error
			switch {
			case !o.patient:
				err = w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
				deadline = true
			case deadline:
				// A cell busy in its own code reads nothing until it ends or is
				// interrupted: a reply waits for that, however long.
				err = w.conn.SetWriteDeadline(time.Time{})
				deadline = false
			}
			if err == nil {
				_, err = w.conn.Write(o.frame)
			}
			if o.written != nil {
				o.written <- err
			}
			if err != nil {
				w.invalidate(fmt.Errorf("writing %s: %w", o.kind, err))
				return
			}
		}
	}
}

// encode makes m's frame. A reply the host cannot encode (a service's value that is
// not JSON) becomes an error reply saying so, so that the cell awaiting it is answered.
func (w *Worker) encode(m wire.Message) ([]byte, error) {
	env := wire.Envelope{SessionID: w.cfg.SessionID, Generation: w.cfg.Generation, Message: m}
	frame, err := wire.AppendEnvelope(nil, env)
	if reply, ok := m.(wire.HostReply); ok && err != nil {
		w.log.Error("a host reply that cannot be encoded", "request", reply.ID, "err", err)
		reply.Reply = wire.Reply{Kind: wire.ReplyError, Code: CodeHostFailed,
			Message: fmt.Sprintf("the host could not encode its reply: %v", err)}
		env.Message = reply
		frame, err = wire.AppendEnvelope(nil, env)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: encoding %s: %w", m.Kind(), err)
	}
	return frame, nil
}

// send queues m for the writer; written, when not nil, is told the outcome of its write.
// It never waits on the socket: an error is a frame that could not be made or queued.
func (w *Worker) send(m wire.Message, written chan error) error {
	frame, err := w.encode(m)
	if err != nil {
		return err
	}
	_, patient := m.(wire.HostReply)
	return w.queue(outgoing{frame: frame, kind: m.Kind(), patient: patient, written: written})
}

// queue hands a frame to the writer. A queue the worker leaves unread past
// maxOutboxBytes ends the generation.
func (w *Worker) queue(o outgoing) error {
	err := w.out.push(o)
	if errors.Is(err, errOutboxFull) {
		go w.invalidate(err)
	}
	return err
}
