package lossless

import (
	"fmt"
	"strings"
	"testing"
)

// mixed returns a value like a program's result, about 1 MB as JSON:
// records with keys, short and long strings, escapes, non-ASCII text,
// integers, fractions and nesting.
func mixed() Value {
	var records Array
	for i, n := 0, 0; n < 1<<20; i++ {
		r := NewObject(
			Member{"id", Number(i)},
			Member{"name", String(fmt.Sprintf("user-%d", i))},
			Member{"email", String(fmt.Sprintf("user%d@example.com", i))},
			Member{"score", Number(float64(i) * 0.37)},
			Member{"active", Bool(i%3 == 0)},
			Member{"tags", Array{String("alpha"), String("beta"), String("γάμμα")}},
			Member{"bio", String(strings.Repeat("Line with \"quotes\", a tab\t and é, 😀.\n", 1+i%4))},
			Member{"geo", NewObject(Member{"lat", Number(48.8566 + float64(i)*1e-4)}, Member{"lon", Number(2.3522)})},
			Member{"10", nil},
		)
		records = append(records, r)
		n += Size(r) + len(",")
	}
	return records
}

// benchValues returns the values the benchmarks run on: mixed, and
// [0,0,…] of 6,000,000 elements.
func benchValues() []struct {
	name string
	v    Value
} {
	zeros := make(Array, 6_000_000)
	for i := range zeros {
		zeros[i] = Number(0)
	}
	return []struct {
		name string
		v    Value
	}{{"mixed", mixed()}, {"zeros", zeros}}
}

// bench runs op on each of benchValues and its JSON text, counting the
// bytes of the text.
func bench(b *testing.B, op func(b *testing.B, v Value, text []byte)) {
	for _, bm := range benchValues() {
		b.Run(bm.name, func(b *testing.B) {
			text := Encode(bm.v)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				op(b, bm.v, text)
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	var buf []byte
	bench(b, func(b *testing.B, v Value, _ []byte) { buf = Append(buf[:0], v) })
}

func BenchmarkDecode(b *testing.B) {
	bench(b, func(b *testing.B, _ Value, text []byte) {
		if _, err := Decode(text); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	bench(b, func(b *testing.B, v Value, text []byte) {
		if err := Check(v, len(text)); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkUnsafeInteger(b *testing.B) {
	bench(b, func(b *testing.B, _ Value, text []byte) {
		if UnsafeInteger(text) {
			b.Fatal("unsafe")
		}
	})
}
