package poll

import (
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// ReadFIFO reads the FIFO at path until its writer closes it, and returns what it
// wrote. It fails t once timeout has passed before then: a writer that never opens the
// FIFO, or never closes it, ends the test rather than hanging it.
func ReadFIFO(t testing.TB, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path) // blocks until a writer opens it
		ch <- opened{f, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var o opened
	select {
	case o = <-ch:
	case <-timer.C:
		// A writer of the test's own ends the open that waits; it is there to be ended
		// by now, or soon.
		for o.f == nil && o.err == nil {
			if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			select {
			case o = <-ch:
			case <-time.After(Interval):
			}
		}
		if o.f != nil {
			o.f.Close()
		}
		t.Fatalf("poll: no writer opened the FIFO %s within %v", path, timeout)
	}
	if o.err != nil {
		t.Fatalf("poll: %v", o.err)
	}
	defer o.f.Close()
	if err := o.f.SetReadDeadline(deadline); err != nil {
		t.Fatalf("poll: the FIFO %s: %v", path, err)
	}
	data, err := io.ReadAll(o.f)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("poll: the FIFO %s was not closed by its writer within %v; read %q", path, timeout, data)
	}
	if err != nil {
		t.Fatalf("poll: the FIFO %s: %v", path, err)
	}
	return string(data)
}
