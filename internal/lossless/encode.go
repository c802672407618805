package lossless

import (
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Encode returns the compact JSON text of v; see Append.
func Encode(v Value) []byte { return Append(nil, v) }

// Append appends to dst the compact JSON text of v, byte for byte what
// JSON.stringify writes for the same JavaScript value, with one exception:
// an integral number is written with all its digits, so that 2**60 is
// 1152921504606846976 and 1e21 is 1000000000000000000000, where String(n)
// would round the one and abbreviate the other. Other numbers are spelled as
// String(n) spells them (0.1, 1e-7, 5e-324); NaN and the infinities as null,
// negative zero as 0, as JSON.stringify writes them: see Lossy.
//
// The exact digits are what the receiver needs to rebuild the very same
// double; they are not what a byte budget counts. Size and Check measure the
// text JSON.stringify itself would write, in which an integral number of
// magnitude 1e21 or more is spelled as String(n) spells it: 1e+21 (5 bytes),
// not its 22 digits. Below 1e21 the two spellings have the same length.
func Append(dst []byte, v Value) []byte {
	return appendValue(dst, v, true)
}

// stringify returns the text JSON.stringify writes for v: Encode's text but
// with every number spelled as String(n) spells it, so that len(stringify(v))
// is Size(v).
func stringify(v Value) []byte { return appendValue(nil, v, false) }

// appendValue appends the JSON text of v, its integral numbers of magnitude
// 1e21 or more as all their digits if exact, else as String(n) spells them.
func appendValue(dst []byte, v Value, exact bool) []byte {
	for w := newWalker(v); w.next(); {
		if w.end != 0 {
			dst = append(dst, w.end)
			continue
		}
		if !w.first {
			dst = append(dst, ',')
		}
		if w.member {
			dst = appendString(dst, w.key)
			dst = append(dst, ':')
		}
		switch v := w.v.(type) {
		case nil:
			dst = append(dst, "null"...)
		case Bool:
			dst = strconv.AppendBool(dst, bool(v))
		case Number:
			if exact {
				dst = appendNumber(dst, float64(v))
			} else {
				dst = appendNumberJS(dst, float64(v))
			}
		case String:
			dst = appendString(dst, string(v))
		case Array:
			dst = append(dst, '[')
		case Object:
			dst = append(dst, '{')
		}
	}
	return dst
}

// A walker walks a value depth first, keeping its own stack instead of
// recursing. Each step moves to a value or to the end of a container; a step
// to a non-empty container is followed by steps through its elements.
type walker struct {
	stack stack[cursor]

	// The current step.
	v      Value
	key    string // v's key, if v is a member
	member bool   // v is an object member
	first  bool   // v is the first element of its container
	end    byte   // ']' or '}' if the step ends a container, else 0
}

// A cursor is a container being walked, an Array or an Object, and the index of its
// next element.
type cursor struct {
	c Value
	i int
}

// newWalker returns a walker whose first step moves to v.
func newWalker(v Value) walker {
	var w walker
	w.stack.push(cursor{c: Array{v}})
	return w
}

// next takes a step and reports whether there was one to take.
func (w *walker) next() bool {
	top := w.stack.top()
	i := top.i
	var more bool
	switch c := top.c.(type) {
	case Array:
		if more = i < len(c); more {
			w.v, w.member = c[i], false
		} else {
			w.end = ']'
		}
	case Object:
		if more = i < len(c.members); more {
			w.v, w.key, w.member = c.members[i].Value, c.members[i].Key, true
		} else {
			w.end = '}'
		}
	}
	if !more {
		w.stack.drop()
		w.v = nil
		return w.stack.len() > 0 // the end of the root's cursor is no step
	}
	top.i++
	w.first, w.end = i == 0, 0
	switch w.v.(type) {
	case Array, Object:
		w.stack.push(cursor{c: w.v})
	}
	return true
}

// appendNumber appends f as Append spells it.
func appendNumber(dst []byte, f float64) []byte {
	if -1<<63 <= f && f < 1<<63 && f == float64(int64(f)) {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return append(dst, "null"...)
	case f == math.Trunc(f): // an integer past ±2^63
		return strconv.AppendFloat(dst, f, 'f', 0, 64)
	case math.Abs(f) >= 1e-6:
		// Not integral, so below 2^52: String(f) uses no exponent.
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	// String(f) has an exponent of at least one digit: e-7, not e-07.
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	if n := len(dst); dst[n-3] == '-' && dst[n-2] == '0' {
		dst[n-2] = dst[n-1]
		dst = dst[:n-1]
	}
	return dst
}

// jsExponent is the magnitude from which String(n) spells a number with an
// exponent even when it is integral: 1e21 is "1e+21".
const jsExponent = 1e21

// appendNumberJS appends f as JavaScript's String(f) spells it, and so as
// JSON.stringify writes it: as appendNumber, but for an integral f of
// magnitude 1e21 or more, which String(f) writes in its shortest exponent
// form (1e+21, 1.2345e+300) rather than with all its digits.
func appendNumberJS(dst []byte, f float64) []byte {
	if math.Abs(f) >= jsExponent && !math.IsInf(f, 0) {
		// The shortest digits that round-trip, as ECMAScript's
		// Number::toString picks them; the exponent, 21 or more, has
		// the two or three digits strconv writes, after an explicit +.
		return strconv.AppendFloat(dst, f, 'e', -1, 64)
	}
	return appendNumber(dst, f)
}

// numberSize returns len(appendNumberJS(nil, f)): the bytes JSON.stringify
// writes for f.
func numberSize(f float64) int {
	var buf [32]byte // enough for every spelling appendNumberJS writes
	return len(appendNumberJS(buf[:0], f))
}

// short maps each ASCII byte JSON.stringify writes as a two-byte escape to
// the letter after the backslash.
var short = [utf8.RuneSelf]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// asciiSize returns how many bytes JSON.stringify writes for an ASCII byte.
func asciiSize(c byte) int {
	switch {
	case short[c] != 0:
		return 2 // \n
	case c < ' ':
		return 6 // \u001f
	}
	return 1
}

// unitSize returns how many bytes appendString writes for what unit
// returned: a lone surrogate escaped, anything else in UTF-8.
func unitSize(r rune) int {
	if utf16.IsSurrogate(r) {
		return 6 // \udxxx
	}
	return utf8.RuneLen(r)
}

// unit decodes the code point s begins with, s not beginning with ASCII,
// returning it and its width in s. A lone surrogate is three bytes of WTF-8;
// two such spelling a surrogate pair are the code point the pair makes, width
// 6; a byte that begins none of these is utf8.RuneError, width 1.
func unit(s string) (rune, int) {
	r, w := utf8.DecodeRuneInString(s)
	if r != utf8.RuneError || w > 1 {
		return r, w
	}
	hi, ok := surrogate(s)
	if !ok {
		return utf8.RuneError, 1
	}
	if lo, ok := surrogate(s[3:]); ok && hi < 0xdc00 && lo >= 0xdc00 {
		return utf16.DecodeRune(hi, lo), 6
	}
	return hi, 3
}

// surrogate decodes the WTF-8 surrogate s begins with, if it does.
func surrogate(s string) (rune, bool) {
	if len(s) < 3 || s[0] != 0xed || s[1] < 0xa0 || s[1] > 0xbf || s[2] < 0x80 || s[2] > 0xbf {
		return 0, false
	}
	return 0xd000 | rune(s[1]&0x3f)<<6 | rune(s[2]&0x3f), true
}

// appendString appends s as a JSON string literal, escaped as JSON.stringify
// escapes it.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0 // s[start:i] is yet to be copied as it is
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiSize(c) > 1 {
				dst = appendEscape(append(dst, s[start:i]...), rune(c))
				start = i + 1
			}
			i++
			continue
		}
		r, w := unit(s[i:])
		if unitSize(r) != w { // not already UTF-8 as it will be written
			dst = append(dst, s[start:i]...)
			if utf16.IsSurrogate(r) {
				dst = appendEscape(dst, r)
			} else {
				dst = utf8.AppendRune(dst, r)
			}
			start = i + w
		}
		i += w
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscape appends the JSON escape of r, an ASCII byte or a surrogate.
func appendEscape(dst []byte, r rune) []byte {
	if r < utf8.RuneSelf && short[r] != 0 {
		return append(dst, '\\', short[r])
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', hex[r>>12], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}

// stringSize returns len(appendString(nil, s)), or once the count passes
// limit, a number above limit.
func stringSize(s string, limit int) int {
	n := 2 // the quotes
	for i := 0; i < len(s) && n <= limit; {
		if c := s[i]; c < utf8.RuneSelf {
			n += asciiSize(c)
			i++
			continue
		}
		r, w := unit(s[i:])
		n += unitSize(r)
		i += w
	}
	return n
}
