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

// ErrStopped is the error of a DecodeUntil whose stop channel closed first.
var ErrStopped = errors.New("lossless: decoding stopped")

// DecodeUntil is Decode, given up with ErrStopped once stop is closed: it looks at
// stop every stopEvery values, so that a caller's deadline ends the decoding of a
// large text within microseconds. A nil stop never closes.
func DecodeUntil(data []byte, stop <-chan struct{}) (Value, error) {
	d := decoder{data: data, stop: stop}
	return d.decode()
}

// stopEvery is how many values DecodeUntil decodes between looks at its stop channel.
const stopEvery = 4096

// A decoder parses one JSON text without recursion. The elements of the
// containers it has begun and not ended wait on its own stacks.
type decoder struct {
	data  []byte
	i     int           // offset of the next byte
	open  stack[level]  // containers begun, innermost last
	keys  stack[string] // of the open objects, innermost last: the member whose value comes next
	vals  stack[Value]  // elements of the open arrays
	mems  stack[Member] // members of the open objects
	buf   []byte        // scratch for strings with escapes
	stop  <-chan struct{}
	count int // steps taken, for stop
}

// A level is a container the decoder has begun: small, as a text may open
// millions.
type level struct {
	start int  // where its elements begin in vals or mems
	end   byte // its closing bracket: ']' for an array, '}' for an object
}

func (d *decoder) decode() (Value, error) {
	for {
		if d.stopped() {
			return nil, ErrStopped
		}
		v, begun, err := d.value()
		if err != nil {
			return nil, err
		}
		if begun {
			continue
		}
		// v is whole: add it to its container, closing those that end.
		for {
			if d.open.len() == 0 {
				if d.space(); d.i < len(d.data) {
					return nil, d.fail("end of input")
				}
				return v, nil
			}
			top := d.open.top()
			if top.end == '}' {
				d.mems.push(Member{*d.keys.top(), v})
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
			if d.stopped() {
				return nil, ErrStopped
			}
			v = d.close()
		}
	}
}

// stopped counts a step and, every stopEvery steps, reports whether stop is closed.
func (d *decoder) stopped() bool {
	if d.count++; d.stop == nil || d.count%stopEvery != 0 {
		return false
	}
	select {
	case <-d.stop:
		return true
	default:
		return false
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
			d.keys.push("")
		}
		d.open.push(l)
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
	*d.keys.top() = k
	return nil
}

// close ends the innermost container, its closing bracket parsed, and
// returns it.
func (d *decoder) close() Value {
	l := *d.open.top()
	d.open.drop()
	if l.end == '}' {
		d.keys.drop()
		return newObject(d.mems.pop(l.start))
	}
	return Array(d.vals.pop(l.start))
}

// A stack is a stack of elements kept in blocks that stay where they are: a slice
// would copy itself each time it grew, which for an array of millions of elements
// takes longer than the rest of decoding, and would hold up to twice what it needs
// meanwhile. Blocks are kept once made, so that a stack that shrinks and grows
// again across a block's edge allocates nothing.
type stack[T any] struct {
	blocks [][]T // each blockSize long but the first, which grows to it
	n      int   // elements held
}

// blockSize is the length of every block but the first. The first block starts at
// firstBlock and grows to blockSize, so that a small text costs small blocks.
const (
	blockSize  = 1024
	firstBlock = 8
)

func (s *stack[T]) len() int { return s.n }

func (s *stack[T]) push(v T) {
	k, j := s.n/blockSize, s.n%blockSize
	if k == len(s.blocks) {
		size := blockSize
		if k == 0 {
			size = firstBlock
		}
		s.blocks = append(s.blocks, make([]T, 0, size))
	}
	if b := &s.blocks[k]; j < len(*b) {
		(*b)[j] = v
	} else {
		*b = append(*b, v) // the first block grows by doubling: nothing points into it
	}
	s.n++
}

// top returns the last element; the stack is not empty.
func (s *stack[T]) top() *T {
	k, j := (s.n-1)/blockSize, (s.n-1)%blockSize
	return &s.blocks[k][j]
}

// drop removes the last element; the stack is not empty.
func (s *stack[T]) drop() {
	var zero T
	*s.top() = zero
	s.n--
}

// pop removes the elements from the start'th on and returns them in a new
// slice.
func (s *stack[T]) pop(start int) []T {
	n := s.n - start
	if n == 0 {
		return nil
	}
	out := make([]T, 0, n)
	var zero T
	for k := start / blockSize; k*blockSize < s.n; k++ {
		b := s.blocks[k][max(start-k*blockSize, 0):min(s.n-k*blockSize, len(s.blocks[k]))]
		out = append(out, b...)
		for i := range b {
			b[i] = zero // let go of what the stack no longer holds
		}
	}
	s.n = start
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
