package program

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// FrameHeadroom is what a run's frame cap allows beyond its larger budget: room for a
// frame's own members, and for a binding call's arguments, which no budget meters.
// The child refuses to send a call whose frame would pass the cap.
const FrameHeadroom = 1 << 20

// FrameCap caps one inbound line on fd 3 of a run with limits l (defaults applied),
// newline excluded: the larger of its log and value budgets plus FrameHeadroom. A
// longer line ends the run as worker-exit. The cap holds before anything is parsed:
// the reader keeps at most the cap plus one read of a line that has no newline yet,
// and what parsing one line can cost is a multiple of it (docs/programs.md).
func FrameCap(l Limits) int {
	return max(l.MaxLogBytes, l.MaxValueBytes) + FrameHeadroom
}

// readChunk is how much the reader asks the socket for at a time.
const readChunk = 64 << 10

// ErrFrameTooLarge is a line on fd 3 longer than the reader's cap.
var ErrFrameTooLarge = errors.New("program: protocol frame too large")

// lineReader splits what the child writes on fd 3 into lines, refusing any longer
// than max bytes as soon as it has seen max+1 of them.
type lineReader struct {
	r    io.Reader
	max  int
	buf  []byte
	head int // buf[head:] is yet to be returned
	scan int // buf[head:scan] holds no newline
	err  error
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: r, max: max}
}

// next returns the next line without its newline; the slice is valid until the next
// call. At the end of input it returns io.EOF (a last line without a newline is not a
// frame, and is dropped); a line longer than max gives ErrFrameTooLarge.
func (lr *lineReader) next() ([]byte, error) {
	for {
		if i := bytes.IndexByte(lr.buf[lr.scan:], '\n'); i >= 0 {
			end := lr.scan + i
			line := lr.buf[lr.head:end]
			lr.head, lr.scan = end+1, end+1
			if len(line) > lr.max {
				return nil, fmt.Errorf("%w: over %d bytes", ErrFrameTooLarge, lr.max)
			}
			return line, nil
		}
		lr.scan = len(lr.buf)
		if lr.scan-lr.head > lr.max {
			return nil, fmt.Errorf("%w: over %d bytes", ErrFrameTooLarge, lr.max)
		}
		if lr.err != nil {
			return nil, lr.err
		}
		lr.fill()
	}
}

// fill reads once more into buf, first moving what is left to its start.
func (lr *lineReader) fill() {
	if lr.head == len(lr.buf) && cap(lr.buf) > 1<<20 {
		lr.buf, lr.head, lr.scan = nil, 0, 0 // let a big line's buffer go
	}
	if lr.head > 0 {
		n := copy(lr.buf, lr.buf[lr.head:])
		lr.buf = lr.buf[:n]
		lr.scan -= lr.head
		lr.head = 0
	}
	// Never ask for more than the rest of a line of max+1 bytes, newline included,
	// and a chunk: so the reader holds at most max+readChunk+1 bytes.
	want := min(readChunk, lr.max+2-len(lr.buf))
	want = max(want, 1)
	if cap(lr.buf)-len(lr.buf) < want {
		size := min(max(2*cap(lr.buf), readChunk), lr.max+2)
		grown := make([]byte, len(lr.buf), max(size, len(lr.buf)+want))
		copy(grown, lr.buf)
		lr.buf = grown
	}
	n, err := lr.r.Read(lr.buf[len(lr.buf) : len(lr.buf)+want])
	lr.buf = lr.buf[:len(lr.buf)+n]
	if err != nil {
		lr.err = err
	}
}
