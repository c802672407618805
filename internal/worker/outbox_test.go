package worker

import (
	"errors"
	"testing"
)

func TestOutboxAtItsLimitAndOnePast(t *testing.T) {
	b := newOutbox()
	if err := b.push(outgoing{frame: make([]byte, maxOutboxBytes-1), kind: "host_reply"}); err != nil {
		t.Fatal(err)
	}
	if err := b.push(outgoing{frame: make([]byte, 1), kind: "host_reply"}); err != nil {
		t.Errorf("a frame filling the queue to %d bytes: %v; want it queued", maxOutboxBytes, err)
	}
	if err := b.push(outgoing{frame: make([]byte, 1), kind: "interrupt"}); !errors.Is(err, errOutboxFull) {
		t.Errorf("one byte past %d: %v; want errOutboxFull", maxOutboxBytes, err)
	}
	if q := b.take(); len(q) != 2 || len(q[1].frame) != 1 {
		t.Fatalf("took %d frames; want the 2 queued, in order", len(q))
	}
	if err := b.push(outgoing{frame: make([]byte, maxOutboxBytes), kind: "host_reply"}); err != nil {
		t.Errorf("once taken, a frame of the whole limit: %v; want it queued", err)
	}
	if q := b.close(); len(q) != 1 {
		t.Errorf("close returned %d frames; want the 1 unwritten", len(q))
	}
	if err := b.push(outgoing{frame: []byte("x"), kind: "shutdown"}); !errors.Is(err, ErrDead) {
		t.Errorf("push after close: %v; want ErrDead", err)
	}
}
