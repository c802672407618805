package lossless

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecode checks Decode against encoding/json's validator, and that what
// it decodes encodes to a text that decodes to the same text again, and that
// Size and Check measure JSON.stringify's text of it.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`null`, `[1,2.5,-0,1e400]`, `{"b":1,"2":[],"1":{},"a":"x"}`, `{"a":1,"a":2}`,
		`"\ud83d\ude00\ud800\u0000"`, `9007199254740993`, `[[[[[]]]]]`, `{"a":[{"b":null}]}`,
		`[01]`, "\"\xff\"", `{"a" 1}`, `1e-7`, `"\/"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		UnsafeInteger(data) // must not panic
		v, err := Decode(data)
		if valid := json.Valid(data) && utf8.Valid(data); (err == nil) != valid {
			t.Fatalf("Decode(%q) = %v; json.Valid and utf8.Valid say %v", data, err, valid)
		}
		if err != nil {
			return
		}
		text := Encode(v)
		js := stringify(v)
		if n := Size(v); n != len(js) {
			t.Fatalf("Size = %d; len(stringify) = %d for %q", n, len(js), js)
		}
		if len(js) > len(text) {
			t.Fatalf("stringify is longer than Encode: %q, %q", js, text)
		}
		var want error
		if Lossy(v) {
			want = ErrLossy
		}
		if err := Check(v, len(js)); err != want {
			t.Fatalf("Check(v, %d) = %v; want %v for %q", len(js), err, want, js)
		}
		if err := Check(v, len(js)-1); err != ErrTooLarge {
			t.Fatalf("Check(v, %d) = %v; want ErrTooLarge for %q", len(js)-1, err, js)
		}
		if vjs, err := Decode(js); err != nil || !bytes.Equal(Encode(vjs), text) {
			t.Fatalf("Decode(stringify) = %v, %q; want %q", err, Encode(vjs), text)
		}
		v2, err := Decode(text)
		if err != nil {
			t.Fatalf("Decode(Encode(v)) = %v for %q", err, text)
		}
		if text2 := Encode(v2); !bytes.Equal(text2, text) {
			t.Fatalf("Encode(Decode(%q)) = %q", text, text2)
		}
	})
}

// FuzzString checks the escaping of any Go string, WTF-8 or not: the text
// decodes, encodes back the same, has the size Size reports, and gives back
// the string itself if it is WTF-8 with no surrogate pair split in two.
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "a\"\\\n\x01\x7f", "é😀", "\xed\xa0\x80", "\xed\xa0\xbd\xed\xb8\x80", "\xff\xc3", "\xed\xa0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := Array{String(s), NewObject(Member{s, String(s)})}
		text := Encode(v)
		if n := Size(v); n != len(text) {
			t.Fatalf("Size = %d; len(Encode) = %d for %q", n, len(text), text)
		}
		if !utf8.Valid(text) {
			t.Fatalf("Encode(%q) = %q, not UTF-8", s, text)
		}
		v2, err := Decode(text)
		if err != nil {
			t.Fatalf("Decode(%q) = %v", text, err)
		}
		if text2 := Encode(v2); !bytes.Equal(text2, text) {
			t.Fatalf("Encode(Decode(%q)) = %q", text, text2)
		}
		if got := v2.(Array)[0].(String); isWTF8(s) && string(got) != s {
			t.Fatalf("%q decoded as %q", s, got)
		}
	})
}

// isWTF8 reports whether s is WTF-8 with no surrogate pair split in two.
func isWTF8(s string) bool {
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, w := unit(s[i:])
		if r == utf8.RuneError && w == 1 || w == 6 {
			return false
		}
		i += w
	}
	return true
}

// FuzzNumber checks that any float64 encodes to a text that decodes to the
// same number, the shortest one for a fraction, all digits for an integer,
// which UnsafeInteger then passes.
func FuzzNumber(f *testing.F) {
	for _, x := range []float64{0, 1, 0.1, 1e-7, 1e21, 1 << 60, 5e-324, math.MaxFloat64, math.Inf(1), math.NaN(), -1.5e-300} {
		f.Add(math.Float64bits(x))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		text := Encode(Number(x))
		js := stringify(Number(x))
		if n := Size(Number(x)); n != len(js) {
			t.Fatalf("Size(%v) = %d; len(stringify) = %d", x, n, len(js))
		}
		if math.Abs(x) < 1e21 && !bytes.Equal(js, text) {
			t.Fatalf("stringify(%v) = %s; Encode = %s: they differ below 1e21", x, js, text)
		}
		if !math.IsInf(x, 0) && !math.IsNaN(x) {
			if v, err := Decode(js); err != nil || float64(v.(Number)) != x {
				t.Fatalf("Decode(stringify(%v)) = %v, %v", x, v, err)
			}
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			if string(text) != "null" {
				t.Fatalf("Encode(%v) = %s; want null", x, text)
			}
			return
		}
		v, err := Decode(text)
		if err != nil {
			t.Fatalf("Decode(Encode(%v)) = %v", x, err)
		}
		if got := float64(v.(Number)); got != x || math.Signbit(got) && got == 0 {
			t.Fatalf("Decode(%s) = %v; want %v", text, got, x)
		}
		if UnsafeInteger(text) {
			t.Fatalf("UnsafeInteger(%s) = true", text)
		}
		if x == math.Trunc(x) {
			if strings.Trim(string(text), "-0123456789") != "" {
				t.Fatalf("Encode(%v) = %s; want integer digits", x, text)
			}
		} else if got, want := digits(string(text)), digits(strconv.FormatFloat(x, 'e', -1, 64)); got != want {
			t.Fatalf("Encode(%v) = %s; want the shortest digits, %s", x, text, want)
		}
	})
}

// digits returns the significant digits of a number's spelling.
func digits(s string) string {
	s, _, _ = strings.Cut(s, "e")
	return strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(s), "0")
}

// FuzzUnsafeInteger checks exact, and so UnsafeInteger, against math/big.
func FuzzUnsafeInteger(f *testing.F) {
	for _, s := range []string{"0", "9007199254740993", "18446744073709551616", "1" + strings.Repeat("0", 308), "1" + strings.Repeat("0", 309)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || strings.Trim(s, "0123456789") != "" {
			return
		}
		m, _ := new(big.Int).SetString(s, 10)
		_, acc := new(big.Float).SetInt(m).Float64()
		want := acc != big.Exact
		if got := UnsafeInteger([]byte(s)); got != want {
			t.Fatalf("UnsafeInteger(%s) = %v; want %v", s, got, want)
		}
		if got := UnsafeInteger([]byte("[-" + s + "]")); got != want {
			t.Fatalf("UnsafeInteger([-%s]) = %v; want %v", s, got, want)
		}
	})
}
