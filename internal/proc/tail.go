package proc

import (
	"bytes"
	"strings"
	"sync"
)

// TailSize is the size of the diagnostic tails kept of a process's raw output.
const TailSize = 8 << 10

// Tail is an io.Writer that keeps only the last bytes written to it, up to a bound, and
// counts what it let go. It is safe for concurrent use.
type Tail struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int64
}

// NewTail returns a Tail that keeps the last max bytes.
func NewTail(max int) *Tail {
	return &Tail{max: max, buf: make([]byte, 0, max)}
}

// Write keeps the end of p. It never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.dropped += int64(len(t.buf) + len(p) - t.max)
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.dropped += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the bytes kept as text, each byte that is not UTF-8 as U+FFFD, prefixed
// by a note of how many earlier ones were let go.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Text for messages and records: a process may write anything, and the kept end
	// may begin inside a character.
	text := strings.ToValidUTF8(string(t.buf), "\uFFFD")
	if t.dropped == 0 {
		return text
	}
	return "[" + itoa(t.dropped) + " earlier bytes not kept]\n" + text
}

// Dropped reports how many bytes were written and not kept.
func (t *Tail) Dropped() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

// Bytes returns a copy of the bytes kept, without a note of what was let go.
func (t *Tail) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}
