package busypoll

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// pair returns the two ends of a connected Unix socket.
func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed := make(chan *net.UnixConn, 1)
	go func() {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	a, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	b := <-dialed
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// readAsync reads once into a fresh buffer and reports what it got.
func readAsync(r *Reader, size int) <-chan string {
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, size)
		n, err := r.Read(buf)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	return got
}

func TestReadsWhatIsSentWithAndWithoutAWindow(t *testing.T) {
	a, b := pair(t)
	r, err := NewReader(a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, expect := range []bool{false, true, false, true} {
		if expect {
			r.Expect()
		}
		got := readAsync(r, 16)
		b.Write([]byte("ping"))
		if s := <-got; s != "ping" {
			t.Fatalf("expect=%v: got %q", expect, s)
		}
	}
}

func TestExpectWakesAParkedReadWhichWaitsOnForData(t *testing.T) {
	a, b := pair(t)
	r, err := NewReader(a, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	got := readAsync(r, 16)
	for !r.parked.Load() {
		time.Sleep(time.Millisecond)
	}
	r.Expect() // wakes the wait, which polls for the window and parks again
	time.Sleep(60 * time.Millisecond)
	select {
	case s := <-got:
		t.Fatalf("read returned %q with nothing sent", s)
	default:
	}
	b.Write([]byte("late"))
	if s := <-got; s != "late" {
		t.Fatalf("got %q", s)
	}
}

func TestEndOfStreamAndClose(t *testing.T) {
	a, b := pair(t)
	r, err := NewReader(a, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if n, err := r.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Errorf("after the peer closed: %d, %v; want 0, EOF", n, err)
	}

	c, _ := pair(t)
	r, err = NewReader(c, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	got := readAsync(r, 4)
	for !r.parked.Load() {
		time.Sleep(time.Millisecond)
	}
	c.Close()
	if s := <-got; s == "" || s[:6] != "error:" {
		t.Errorf("a read of a closed connection returned %q", s)
	}
	if _, err := r.Read(make([]byte, 4)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after close: %v; want net.ErrClosed", err)
	}
}
