package program

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestOutboxBounds fills an outbox whose writer is stuck in its first write: replies
// are taken up to MaxRepliesQueued and MaxReplyQueueBytes, the one past either is
// refused, and host frames never are.
func TestOutboxBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		sizes []int // the replies at the limit
		past  int   // the reply one past it
	}{
		{"count", repeat(MaxRepliesQueued, 1), 1},
		{"bytes", []int{MaxReplyQueueBytes - 10, 10}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pr, pw := io.Pipe()
			o := newOutbox(pw)
			done := make(chan struct{})
			go func() {
				defer close(done)
				o.run()
			}()
			for i, n := range tc.sizes {
				if err := o.reply(make([]byte, n)); err != nil {
					t.Fatalf("reply %d of %d bytes: %v", i, n, err)
				}
			}
			if err := o.reply(make([]byte, tc.past)); !errors.Is(err, errReplyQueue) {
				t.Fatalf("one past the limit: %v; want errReplyQueue", err)
			}
			o.send([]byte("boot\n")) // a host frame is never refused
			// Once the child reads, the queue drains and takes replies again.
			var want int
			for _, n := range tc.sizes {
				want += n
			}
			if _, err := io.CopyN(io.Discard, pr, int64(want)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 5)
			if _, err := io.ReadFull(pr, got); err != nil || !bytes.Equal(got, []byte("boot\n")) {
				t.Fatalf("read %q, %v; want the boot frame after the replies", got, err)
			}
			if err := o.reply([]byte("r\n")); err != nil {
				t.Fatalf("after draining: %v", err)
			}
			if _, err := io.ReadFull(pr, got[:2]); err != nil {
				t.Fatal(err)
			}
			o.close()
			<-done
			if n, b := o.waiting(); n != 0 || b != 0 {
				t.Errorf("waiting %d replies, %d bytes once written; want none", n, b)
			}
		})
	}
}

// TestOutboxStopsOnAFailedWrite checks the writer returns when its peer is gone, and
// that a reply after that is dropped quietly.
func TestOutboxStopsOnAFailedWrite(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	pr.Close()
	o := newOutbox(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.run()
	}()
	o.send([]byte("boot\n"))
	<-done
	if err := o.reply([]byte("r\n")); err != nil {
		t.Errorf("a reply after the writer stopped: %v; want it dropped", err)
	}
}

func repeat(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}
