package program

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// TestOutboxBounds fills an outbox whose writer is stuck in its first write: up to
// MaxRepliesQueued replies and MaxReplyQueueBytes bytes, a call reserves room; at
// either bound it waits, and gives up once nothing was written for the stall. Once the
// child reads, there is room again.
func TestOutboxBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		sizes []int // the replies just under the bound; one more reaches it
		last  int
	}{
		{"count", repeat(MaxRepliesQueued-1, 1), 1},
		{"bytes", []int{MaxReplyQueueBytes - 11, 10}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pr, pw := io.Pipe()
			const stall = 200 * time.Millisecond
			o := newOutbox(pw, stall)
			done := make(chan struct{})
			go func() {
				defer close(done)
				o.run()
			}()
			for i, n := range tc.sizes {
				if err := o.reserve(n, nil); err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				o.reply(make([]byte, n), n)
			}
			if err := o.reserve(tc.last, nil); err != nil {
				t.Fatalf("at the bound: %v; want room", err)
			}
			o.reply(make([]byte, tc.last), tc.last)
			start := time.Now()
			if err := o.reserve(1, nil); !errors.Is(err, errReplyQueue) {
				t.Fatalf("at the bound: %v; want errReplyQueue", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("gave up after %v; want about the stall, %v", d, stall)
			}
			o.send([]byte("boot\n")) // a host frame is never refused
			var want int64
			for _, n := range append(tc.sizes, tc.last) {
				want += int64(n)
			}
			if _, err := io.CopyN(io.Discard, pr, want); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 5)
			if _, err := io.ReadFull(pr, got); err != nil || !bytes.Equal(got, []byte("boot\n")) {
				t.Fatalf("read %q, %v; want the boot frame after the replies", got, err)
			}
			if err := o.reserve(1, nil); err != nil {
				t.Fatalf("after the child read: %v; want room", err)
			}
			o.release(1)
			o.close()
			<-done
			if n, b := o.waiting(); n != 0 || b != 0 {
				t.Errorf("waiting %d replies, %d bytes once written; want none", n, b)
			}
		})
	}
}

// TestOutboxWaitsForASlowReader keeps the replies at the bound while the child reads
// them, slowly: a call waits for room, and gets it, however long that takes past the
// stall, as long as replies are being written.
func TestOutboxWaitsForASlowReader(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	const stall = time.Second
	o := newOutbox(pw, stall)
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.run()
	}()
	defer func() { o.close(); pr.Close(); <-done }()
	read := make(chan error, 1)
	go func() {
		// A reader that takes a chunk each quarter of the stall, the whole taking two
		// stalls: each chunk is progress.
		tick := time.NewTicker(stall / 4)
		defer tick.Stop()
		buf := make([]byte, writeChunk)
		for range 8 {
			<-tick.C
			if _, err := io.ReadFull(pr, buf); err != nil {
				read <- err
				return
			}
		}
		_, err := io.CopyN(io.Discard, pr, MaxReplyQueueBytes-8*writeChunk)
		read <- err
	}()
	for _, n := range []int{MaxReplyQueueBytes, 1} { // the bound in one reply, then one past
		if err := o.reserve(n, nil); err != nil {
			t.Fatalf("a slow reader: %v; want room once it read", err)
		}
		o.reply(make([]byte, n), n)
	}
	if err := o.reserve(1, nil); err != nil {
		t.Fatalf("a slow reader: %v; want room once it read", err)
	}
	o.release(1)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

// TestOutboxStopsOnAFailedWrite checks the writer returns when its peer is gone, and
// that a reply after that is dropped quietly.
func TestOutboxStopsOnAFailedWrite(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	pr.Close()
	o := newOutbox(pw, ReplyStall)
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.run()
	}()
	o.send([]byte("boot\n"))
	<-done
	if err := o.reserve(2, nil); err != nil {
		t.Fatal(err)
	}
	o.reply([]byte("r\n"), 2)
	if n, _ := o.waiting(); n != 0 {
		t.Errorf("%d replies waiting after the writer stopped; want them dropped", n)
	}
}

func repeat(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}
