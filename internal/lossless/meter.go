package lossless

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
)

var (
	// ErrTooLarge is Check's error for a value whose JSON text is longer
	// than the limit.
	ErrTooLarge = errors.New("lossless: value exceeds its byte limit")

	// ErrLossy is Check's error for a value holding a number that JSON
	// cannot carry: NaN, an infinity or negative zero.
	ErrLossy = errors.New("lossless: value holds NaN, an infinity or negative zero")
)

// Size returns the length of the compact JSON text JSON.stringify writes for
// v, without writing it: what the program child measures against its
// completion budget. It is len(Encode(v)) unless v holds an integral number
// of magnitude 1e21 or more: Size counts that number as String(n) spells it,
// 1e+21 (5 bytes) or 1.2345e+300, while Encode writes all its digits (see
// Append).
func Size(v Value) int {
	n, _ := measure(v, math.MaxInt)
	return n
}

// Check returns ErrTooLarge if the JSON text of v, as Size measures it
// (JSON.stringify's text, numbers of magnitude 1e21 or more in their short
// exponent spelling), is longer than limit bytes, else ErrLossy if Lossy(v),
// else nil. Being too large comes first
// wherever the lossy number lies. Check stops as soon as the bytes it has
// counted and the least the rest could take pass limit: it rejects an array
// of n elements, or an object of n members, that cannot fit even if each
// element took one byte, or each member `"":` and one byte, before walking
// any of them. Strings are measured without being escaped into a copy.
func Check(v Value, limit int) error {
	switch n, lossy := measure(v, limit); {
	case n > limit:
		return ErrTooLarge
	case lossy:
		return ErrLossy
	}
	return nil
}

// Measure is Check returning Size(v) as well, when v is within limit: one walk
// where Check and Size would take two. Past limit the size it returns is only
// above limit.
func Measure(v Value, limit int) (int, error) {
	switch n, lossy := measure(v, limit); {
	case n > limit:
		return n, ErrTooLarge
	case lossy:
		return n, ErrLossy
	default:
		return n, nil
	}
}

// measure returns Size(v), or once that is sure to pass limit a number
// above limit, and whether it met a lossy number.
func measure(v Value, limit int) (n int, lossy bool) {
	need := 1 // the fewest bytes the values not yet reached can take
	for w := newWalker(v); w.next(); {
		if w.end != 0 {
			continue // counted with the opening bracket
		}
		if w.member {
			need -= len(`""`)
			n += stringSize(w.key, limit-n-need)
		}
		need--
		switch v := w.v.(type) {
		case nil:
			n += len("null")
		case Bool:
			n += len(strconv.FormatBool(bool(v)))
		case Number:
			n += numberSize(float64(v))
			lossy = lossy || isLossy(float64(v))
		case String:
			n += stringSize(string(v), limit-n-need)
		case Array:
			n += len("[]") + commas(len(v))
			need += len(v)
		case Object:
			c := len(v.members)
			n += len("{}") + commas(c) + c*len(":")
			need += c * len(`""0`)
		}
		if n+need > limit {
			return n + need, lossy
		}
	}
	return n, lossy
}

// commas returns how many commas separate n elements.
func commas(n int) int { return max(n-1, 0) }

// Lossy reports whether v holds NaN, an infinity or negative zero anywhere:
// JSON.stringify writes the first three as null and the last as 0.
func Lossy(v Value) bool {
	for w := newWalker(v); w.next(); {
		if f, ok := w.v.(Number); ok && isLossy(float64(f)) {
			return true
		}
	}
	return false
}

func isLossy(f float64) bool {
	return math.IsNaN(f) || math.IsInf(f, 0) || f == 0 && math.Signbit(f)
}

// UnsafeInteger reports whether the JSON text data holds, outside string
// literals, an integer token -?[0-9]+ whose value a float64 cannot hold
// exactly: one past ±(2^53−1) that JSON.parse would round, or one so large
// it would become an infinity. 2^53 and 2^64 are safe; 2^53+1 is not. A
// number with a fraction or an exponent is never unsafe. UnsafeInteger does
// not allocate, and on text that is not JSON its answer means nothing.
func UnsafeInteger(data []byte) bool {
	for i := 0; i < len(data); {
		switch c := data[i]; {
		case c == '"': // skip the string literal
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			i++
		case c == '-' || isDigit(c):
			j := i + 1
			for j < len(data) && isDigit(data[j]) {
				j++
			}
			digits := data[i:j]
			if c == '-' {
				digits = digits[1:]
			}
			if j < len(data) && isFractionOrExponent(data[j]) {
				// Not an integer: skip the rest of it.
				for j < len(data) && (isDigit(data[j]) || isFractionOrExponent(data[j]) || data[j] == '+' || data[j] == '-') {
					j++
				}
			} else if len(digits) > 15 && !exact(digits) { // below 10^15, all are exact
				return true
			}
			i = j
		default:
			i++
		}
	}
	return false
}

// exact reports whether the decimal digits spell an integer a float64 holds
// exactly: one below 2^1024 whose binary digits, less trailing zeros, number
// at most 53.
func exact(digits []byte) bool {
	var x [17]uint64 // little-endian, 1088 bits: past 2^1024 by a word
	n := 0           // words in use
	for len(digits) > 0 {
		// x = x·10^k + the next k digits, k ≤ 19 so that 10^k fits a word.
		k := min(len(digits), 19)
		mul, carry := uint64(1), uint64(0)
		for _, c := range digits[:k] {
			mul, carry = mul*10, carry*10+uint64(c-'0')
		}
		digits = digits[k:]
		for j := range x[:n] {
			hi, lo := bits.Mul64(x[j], mul)
			var c uint64
			x[j], c = bits.Add64(lo, carry, 0)
			carry = hi + c
		}
		if carry != 0 {
			if n == len(x) {
				return false
			}
			x[n] = carry
			n++
		}
	}
	if n == 0 {
		return true // zero
	}
	width := (n-1)*64 + bits.Len64(x[n-1])
	z := 0
	for x[z/64] == 0 {
		z += 64
	}
	z += bits.TrailingZeros64(x[z/64])
	return width <= 1024 && width-z <= 53
}
