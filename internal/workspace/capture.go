package workspace

import (
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// capture keeps a command's stdout and stderr up to one byte budget they share, in the
// order they arrive, and counts every byte.
type capture struct {
	mu     sync.Mutex
	budget int64
	kept   [2][]byte
	total  [2]int64
}

func newCapture(budget int64) *capture { return &capture{budget: budget} }

// stream is the writer of stream i (0 stdout, 1 stderr).
func (c *capture) stream(i int) *streamWriter { return &streamWriter{c: c, i: i} }

type streamWriter struct {
	c *capture
	i int
}

// Write keeps what fits in the budget and counts the rest; it never fails.
func (w *streamWriter) Write(p []byte) (int, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total[w.i] += int64(len(p))
	room := c.budget - int64(len(c.kept[0])+len(c.kept[1]))
	if room > 0 {
		n := min(int64(len(p)), room)
		c.kept[w.i] = append(c.kept[w.i], p[:n]...)
	}
	return len(p), nil
}

// fill sets res's texts and counts. A text ends at a character boundary, and invalid
// UTF-8 inside it is replaced by U+FFFD; the truncated counts are exact, in bytes the
// command wrote. The two texts together take at most maxJSON bytes as JSON strings: text
// whose escapes (control bytes cost six) would not fit a reply frame is cut further, and
// counted.
func (c *capture) fill(res *Result, maxJSON int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.kept
	for {
		for i := range 2 {
			if int64(len(kept[i])) < c.total[i] { // cut inside the stream: end at a boundary
				kept[i] = trimPartialRune(kept[i])
			}
		}
		res.Stdout, res.Stderr = toValidUTF8(kept[0]), toValidUTF8(kept[1])
		size := jsonSize(res.Stdout) + jsonSize(res.Stderr)
		if size <= maxJSON {
			break
		}
		for i := range 2 { // shrink both in proportion, with a margin
			kept[i] = kept[i][:int64(len(kept[i]))*int64(maxJSON)/int64(size)*9/10]
		}
	}
	res.StdoutBytes, res.StderrBytes = c.total[0], c.total[1]
	res.StdoutTruncated = c.total[0] - int64(len(kept[0]))
	res.StderrTruncated = c.total[1] - int64(len(kept[1]))
}

// jsonSize is s's size as a JSON string.
func jsonSize(s string) int {
	b, _ := jsontext.AppendQuote(nil, s)
	return len(b)
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]rune, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		out = append(out, r)
		b = b[n:]
	}
	return string(out)
}
