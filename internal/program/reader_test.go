package program

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// xs reads as n bytes of 'x' and a newline, or with n < 0 as 'x' without end, and
// counts the bytes it gave.
type xs struct {
	n, given int
}

func (r *xs) Read(p []byte) (int, error) {
	if r.n >= 0 && r.given > r.n {
		return 0, io.EOF
	}
	k := len(p)
	if r.n >= 0 {
		k = min(k, r.n+1-r.given)
	}
	for i := range k {
		p[i] = 'x'
		if r.n >= 0 && r.given+i == r.n {
			p[i] = '\n'
		}
	}
	r.given += k
	return k, nil
}

// TestLineReaderCap reads a line at the cap and one past it, with the default limits'
// cap.
func TestLineReaderCap(t *testing.T) {
	limit := FrameCap(Limits{}.withDefaults())
	for _, tt := range []struct {
		n    int
		want error
	}{
		{limit, nil},
		{limit + 1, ErrFrameTooLarge},
	} {
		lr := newLineReader(&xs{n: tt.n}, limit)
		line, err := lr.next()
		if !errors.Is(err, tt.want) || tt.want == nil && len(line) != tt.n {
			t.Errorf("a line of %d bytes: got %d bytes, %v; want %v", tt.n, len(line), err, tt.want)
		}
	}
}

// TestLineReaderStopsWithoutNewline feeds an endless line: the reader gives up having
// read at most the cap and one chunk more, without holding the line whole.
func TestLineReaderStopsWithoutNewline(t *testing.T) {
	for _, max := range []int{1, 100, readChunk, 3*readChunk + 7, FrameCap(Limits{}.withDefaults())} {
		r := &xs{n: -1}
		lr := newLineReader(r, max)
		if _, err := lr.next(); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("max %d: got %v; want ErrFrameTooLarge", max, err)
		}
		if r.given <= max || r.given > max+readChunk+1 {
			t.Errorf("max %d: read %d bytes; want just past the cap", max, r.given)
		}
		if cap(lr.buf) > max+2+readChunk {
			t.Errorf("max %d: a buffer of %d bytes", max, cap(lr.buf))
		}
	}
}

func TestLineReaderLines(t *testing.T) {
	input := "a\n\nbc\n" + strings.Repeat("d", 100) + "\nlast without newline"
	for name, r := range map[string]io.Reader{
		"whole":       strings.NewReader(input),
		"byte a time": iotest.OneByteReader(strings.NewReader(input)),
		"half":        iotest.HalfReader(strings.NewReader(input)),
	} {
		lr := newLineReader(r, 100)
		var got []string
		var err error
		for {
			var line []byte
			if line, err = lr.next(); err != nil {
				break
			}
			got = append(got, string(line))
		}
		want := []string{"a", "", "bc", strings.Repeat("d", 100)}
		if strings.Join(got, "|") != strings.Join(want, "|") || err != io.EOF {
			t.Errorf("%s: got %q, %v; want %q, EOF", name, got, err, want)
		}
	}
	lr := newLineReader(strings.NewReader("ok\n"+strings.Repeat("d", 101)+"\n"), 100)
	if line, err := lr.next(); string(line) != "ok" || err != nil {
		t.Errorf("got %q, %v", line, err)
	}
	if _, err := lr.next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("a 101-byte line under a cap of 100: %v; want ErrFrameTooLarge", err)
	}
}
