package lossless

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax is the error, matched with errors.Is, of input that is not one
// strict JSON text in valid UTF-8.
var ErrSyntax = errors.New("lossless: invalid JSON")

// A SyntaxError says where and why Decode rejected its input.
type SyntaxError struct {
	Offset int // of the first byte that cannot begin or continue the text
	msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("lossless: invalid JSON at offset %d: %s", e.Offset, e.msg)
}

// Unwrap returns ErrSyntax.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// Decode parses data, which must be exactly one JSON text (RFC 8259) in valid
// UTF-8, into the value JSON.parse would make of it. Numbers round to the
// nearest float64, out-of-range ones to an infinity as in JSON.parse; see
// UnsafeInteger. Objects are built as by NewObject. Escaped surrogate pairs
// join into one code point; other escaped surrogates stay lone, in WTF-8.
// An error is a *SyntaxError.
func Decode(data []byte) (Value, error) {
	d := decoder{data: data}
	return d.decode()
}

// A decoder parses one JSON text without recursion. The elements of the
// containers it has begun and not ended wait on its own stacks.
type decoder struct {
	data []byte
	i    int           // offset of the next byte
	open []level       // containers begun, innermost last
	vals stack[Value]  // elements of the open arrays
	mems stack[Member] // members of the open objects
	buf  []byte        // scratch for strings with escapes
}

// A level is a container the decoder has begun.
type level struct {
	end   byte   // its closing bracket: ']' for an array, '}' for an object
	start int    // where its elements begin in vals or mems
	key   string // of the member whose value comes next
}

func (d *decoder) decode() (Value, error) {
	for {
		v, begun, err := d.value()
		if err != nil {
			return nil, err
		}
		if begun {
			continue
		}
		// v is whole: add it to its container, closing those that end.
		for {
			if len(d.open) == 0 {
				if d.space(); d.i < len(d.data) {
					return nil, d.fail("end of input")
				}
				return v, nil
			}
			top := &d.open[len(d.open)-1]
			if top.end == '}' {
				d.mems.push(Member{top.key, v})
			} else {
				d.vals.push(v)
			}
			d.space()
			if d.consume(',') {
				if top.end == '}' {
					if err := d.key(); err != nil {
						return nil, err
					}
				}
				break
			}
			if !d.consume(top.end) {
				return nil, d.fail(fmt.Sprintf("',' or '%c'", top.end))
			}
			v = d.close()
		}
	}
}

// value parses a scalar, or begins a container and reports whether its
// first element comes next; an empty container it returns whole.
func (d *decoder) value() (v Value, begun bool, err error) {
	if d.space(); d.i == len(d.data) {
		return nil, false, d.fail("value")
	}
	switch c := d.data[d.i]; c {
	case '[', '{':
		d.i++
		l := level{end: ']', start: d.vals.len()}
		if c == '{' {
			l = level{end: '}', start: d.mems.len()}
		}
		d.open = append(d.open, l)
		if d.space(); d.consume(l.end) {
			return d.close(), false, nil
		}
		if c == '{' {
			return nil, true, d.key()
		}
		return nil, true, nil
	case '"':
		s, err := d.string()
		return String(s), false, err
	case 't':
		return Bool(true), false, d.literal("true")
	case 'f':
		return Bool(false), false, d.literal("false")
	case 'n':
		return nil, false, d.literal("null")
	}
	n, err := d.number()
	return n, false, err
}

// key parses an object member's key and the colon after it.
func (d *decoder) key() error {
	if d.space(); d.i == len(d.data) || d.data[d.i] != '"' {
		return d.fail("string")
	}
	k, err := d.string()
	if err != nil {
		return err
	}
	if d.space(); !d.consume(':') {
		return d.fail("':'")
	}
	d.open[len(d.open)-1].key = k
	return nil
}

// close ends the innermost container, its closing bracket parsed, and
// returns it.
func (d *decoder) close() Value {
	l := d.open[len(d.open)-1]
	d.open = d.open[:len(d.open)-1]
	if l.end == '}' {
		return newObject(d.mems.pop(l.start))
	}
	return Array(d.vals.pop(l.start))
}

// A stack is a decoder's stack of elements, kept in blocks that stay where
// they are: a slice would copy itself each time it grew, which for an array
// of millions of elements takes longer than the rest of decoding.
type stack[T any] struct {
	blocks [][]T // each blockSize long but the last
}

// blockSize is the length of every block but the last. The first block starts at
// firstBlock and grows to blockSize, so that a small text costs small blocks.
const (
	blockSize  = 1024
	firstBlock = 8
)

func (s *stack[T]) len() int {
	if len(s.blocks) == 0 {
		return 0
	}
	return (len(s.blocks)-1)*blockSize + len(s.blocks[len(s.blocks)-1])
}

func (s *stack[T]) push(v T) {
	switch n := len(s.blocks); {
	case n == 0:
		s.blocks = append(s.blocks, make([]T, 0, firstBlock))
	case len(s.blocks[n-1]) == blockSize:
		s.blocks = append(s.blocks, make([]T, 0, blockSize))
	}
	last := &s.blocks[len(s.blocks)-1]
	*last = append(*last, v) // the first block grows by doubling: nothing points into it
}

// pop removes the elements from the start'th on and returns them in a new
// slice.
func (s *stack[T]) pop(start int) []T {
	n := s.len() - start
	if n == 0 {
		return nil
	}
	out := make([]T, 0, n)
	k, j := start/blockSize, start%blockSize
	out = append(out, s.blocks[k][j:]...)
	for _, b := range s.blocks[k+1:] {
		out = append(out, b...)
	}
	s.blocks[k] = s.blocks[k][:j]
	s.blocks = s.blocks[:k+1]
	return out
}

// number parses -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (d *decoder) number() (Number, error) {
	start := d.i
	neg := d.consume('-')
	digits := d.i
	if !d.consume('0') && d.digits() == 0 {
		return 0, d.fail("value")
	}
	if n := d.i - digits; n <= 15 && (d.i == len(d.data) || !isFractionOrExponent(d.data[d.i])) {
		// An integer below 10^15 is exactly a float64.
		var m int64
		for _, c := range d.data[digits:d.i] {
			m = m*10 + int64(c-'0')
		}
		f := float64(m)
		if neg {
			f = -f
		}
		return Number(f), nil
	}
	if d.consume('.') && d.digits() == 0 {
		return 0, d.fail("digit")
	}
	if d.consume('e') || d.consume('E') {
		_ = d.consume('+') || d.consume('-')
		if d.digits() == 0 {
			return 0, d.fail("digit")
		}
	}
	// The grammar admits only what ParseFloat accepts. Out of range, it
	// returns an infinity with an error, and JSON.parse the same infinity.
	f, _ := strconv.ParseFloat(string(d.data[start:d.i]), 64)
	return Number(f), nil
}

func isFractionOrExponent(c byte) bool { return c == '.' || c == 'e' || c == 'E' }

// digits skips decimal digits and returns how many.
func (d *decoder) digits() int {
	start := d.i
	for d.i < len(d.data) && isDigit(d.data[d.i]) {
		d.i++
	}
	return d.i - start
}

// string parses a string literal.
func (d *decoder) string() (string, error) {
	d.i++ // the opening quote
	start := d.i
	d.buf = d.buf[:0] // the string so far, from the first escape on
	for {
		for d.i < len(d.data) && plain[d.data[d.i]] {
			d.i++
		}
		if d.i == len(d.data) {
			return "", d.fail(`'"'`)
		}
		switch c := d.data[d.i]; {
		case c == '"':
			d.i++
			if len(d.buf) == 0 { // no escapes
				return string(d.data[start : d.i-1]), nil
			}
			d.buf = append(d.buf, d.data[start:d.i-1]...)
			return string(d.buf), nil
		case c == '\\':
			d.buf = append(d.buf, d.data[start:d.i]...)
			if err := d.escape(); err != nil {
				return "", err
			}
			start = d.i
		case c < ' ':
			return "", d.fail("string character")
		case c < utf8.RuneSelf:
			d.i++
		default:
			r, w := utf8.DecodeRune(d.data[d.i:])
			if r == utf8.RuneError && w == 1 {
				return "", &SyntaxError{Offset: d.i, msg: "invalid UTF-8"}
			}
			d.i += w
		}
	}
}

// plain marks the bytes a string literal holds as they are: ASCII but for the quote,
// the backslash and the control characters.
var plain = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// escape parses the escape sequence at the cursor into d.buf.
func (d *decoder) escape() error {
	d.i++ // the backslash
	if d.i == len(d.data) {
		return d.fail("escape")
	}
	c := d.data[d.i]
	d.i++
	switch c {
	case '"', '\\', '/':
		d.buf = append(d.buf, c)
	case 'b':
		d.buf = append(d.buf, '\b')
	case 'f':
		d.buf = append(d.buf, '\f')
	case 'n':
		d.buf = append(d.buf, '\n')
	case 'r':
		d.buf = append(d.buf, '\r')
	case 't':
		d.buf = append(d.buf, '\t')
	case 'u':
		r, n := hex4(d.data[d.i:])
		if d.i += n; n < 4 {
			return d.fail("hex digit")
		}
		if 0xd800 <= r && r < 0xdc00 && len(d.data)-d.i >= 6 && d.data[d.i] == '\\' && d.data[d.i+1] == 'u' {
			// A high surrogate, and another \u escape: a pair if a low one.
			if lo, n := hex4(d.data[d.i+2:]); n == 4 && 0xdc00 <= lo && lo < 0xe000 {
				r = utf16.DecodeRune(r, lo)
				d.i += 6
			}
		}
		d.buf = appendWTF8(d.buf, r)
	default:
		d.i--
		return d.fail("escape")
	}
	return nil
}

// hex4 decodes the four hex digits b begins with, returning how many of
// them there are.
func hex4(b []byte) (r rune, n int) {
	for _, c := range b[:min(len(b), 4)] {
		switch {
		case isDigit(c):
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return r, n
		}
		r = r<<4 | rune(c)
		n++
	}
	return r, n
}

// appendWTF8 appends r in UTF-8, or a surrogate as the three bytes of its
// code point.
func appendWTF8(b []byte, r rune) []byte {
	if utf16.IsSurrogate(r) {
		return append(b, 0xed, byte(0x80|r>>6&0x3f), byte(0x80|r&0x3f))
	}
	return utf8.AppendRune(b, r)
}

// literal parses the literal lit: true, false or null.
func (d *decoder) literal(lit string) error {
	for _, c := range []byte(lit) {
		if !d.consume(c) {
			return d.fail(lit)
		}
	}
	return nil
}

// space skips whitespace.
func (d *decoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// consume skips c if it is the next byte and reports whether it was.
func (d *decoder) consume(c byte) bool {
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

// fail returns an error about the byte at the cursor, where want was due.
func (d *decoder) fail(want string) error {
	if d.i == len(d.data) {
		return &SyntaxError{Offset: d.i, msg: "unexpected end of input, want " + want}
	}
	return &SyntaxError{Offset: d.i, msg: fmt.Sprintf("unexpected %q, want %s", d.data[d.i], want)}
}
