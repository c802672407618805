package lossless

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// The expected texts below are what JavaScript's String(n) and
// JSON.stringify give, written by hand, except where Append documents that it
// writes integral numbers with all their digits.
func TestEncodeNumber(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{1, "1"},
		{-1, "-1"},
		{1.0, "1"},
		{0.1, "0.1"},
		{-0.5, "-0.5"},
		{1.5, "1.5"},
		{123.456, "123.456"},
		{1e-6, "0.000001"},
		{1.5e-6, "0.0000015"},
		{-1.234e-6, "-0.000001234"},
		{math.Nextafter(1e-6, 0), "9.999999999999997e-7"},
		{1e-7, "1e-7"},
		{-1e-7, "-1e-7"},
		{1.5e-7, "1.5e-7"},
		{1.23e-18, "1.23e-18"},
		{1e-100, "1e-100"},
		{2.2250738585072014e-308, "2.2250738585072014e-308"},
		{5e-324, "5e-324"},
		{-5e-324, "-5e-324"},
		{1<<52 - 0.5, "4503599627370495.5"},
		{1<<53 - 1, "9007199254740991"},
		{-(1<<53 - 1), "-9007199254740991"},
		{1 << 53, "9007199254740992"},
		{1<<53 + 2, "9007199254740994"},
		{1e15, "1000000000000000"},
		{1e20, "100000000000000000000"},
		{1 << 60, "1152921504606846976"}, // String(2**60) is 1152921504606847000
		{-(1 << 60), "-1152921504606846976"},
		{1 << 63, "9223372036854775808"},
		{-(1 << 63), "-9223372036854775808"},
		{1<<63 - 1024, "9223372036854774784"},
		{1 << 64, "18446744073709551616"},
		{1e21, "1000000000000000000000"}, // String(1e21) is 1e+21
		{1e22, "10000000000000000000000"},
		{1e23, "99999999999999991611392"},
		{math.MaxFloat64, "179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368"},
		{-1e21, "-1000000000000000000000"},
		{math.NaN(), "null"},
		{math.Inf(1), "null"},
		{math.Inf(-1), "null"},
	}
	for _, tt := range tests {
		if got := string(Encode(Number(tt.in))); got != tt.want {
			t.Errorf("Encode(%v) = %s; want %s", tt.in, got, tt.want)
		}
		if math.Abs(tt.in) >= 1e21 {
			continue // Size counts String(n)'s spelling: TestSizeNumber
		}
		if got := Size(Number(tt.in)); got != len(tt.want) {
			t.Errorf("Size(%v) = %d; want %d", tt.in, got, len(tt.want))
		}
	}
}

// TestSizeNumber pins what Size counts for a number: the bytes of String(n),
// which JSON.stringify writes, and which differ from Encode's text only for
// integral numbers of magnitude 1e21 or more. The expected spellings are
// JavaScript's, written by hand; the child measures its budget the same way.
func TestSizeNumber(t *testing.T) {
	tests := []struct {
		in    float64
		want  string // String(in)
		zeros bool   // String(in) pads rounded digits with zeros, where stringify writes them all
	}{
		{1e21, "1e+21", false},
		{-1e21, "-1e+21", false},
		{math.Nextafter(1e21, 0), "999999999999999900000", true},
		{1e20, "100000000000000000000", false},
		{1 << 60, "1152921504606847000", true},
		{1e22, "1e+22", false},
		{1e23, "1e+23", false},
		{1 << 70, "1.1805916207174113e+21", false},
		{1.5e300, "1.5e+300", false},
		{-2.5e300, "-2.5e+300", false},
		{math.MaxFloat64, "1.7976931348623157e+308", false},
		{5e-324, "5e-324", false},
		{0.1, "0.1", false},
		{math.Inf(1), "null", false},
	}
	for _, tt := range tests {
		if got := Size(Number(tt.in)); got != len(tt.want) {
			t.Errorf("Size(%v) = %d; want %d, len(%s)", tt.in, got, len(tt.want), tt.want)
		}
		if got := string(stringify(Number(tt.in))); !tt.zeros && got != tt.want {
			t.Errorf("stringify(%v) = %s; want %s", tt.in, got, tt.want)
		}
		// At the limit and one past it, inside a container.
		v := Array{Number(tt.in)}
		n := len(tt.want) + 2
		if err := Check(v, n); err != nil && !Lossy(v) {
			t.Errorf("Check([%s], %d) = %v; want nil", tt.want, n, err)
		}
		if err := Check(v, n-1); err != ErrTooLarge {
			t.Errorf("Check([%s], %d) = %v; want ErrTooLarge", tt.want, n-1, err)
		}
	}
	// Encode keeps the exact digits, which the receiver needs.
	if got, want := string(Encode(Number(1e21))), "1000000000000000000000"; got != want {
		t.Errorf("Encode(1e21) = %s; want %s", got, want)
	}
	if got, want := string(Encode(Array{Number(1e21)})), "[1000000000000000000000]"; got != want {
		t.Errorf("Encode([1e21]) = %s; want %s", got, want)
	}
	if got := Size(Array{Number(1e21), Number(1e21)}); got != len(`[1e+21,1e+21]`) {
		t.Errorf("Size([1e21,1e21]) = %d; want %d", got, len(`[1e+21,1e+21]`))
	}
}

func TestEncodeString(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"abc", `"abc"`},
		{`"\`, `"\"\\"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{" /\x7f", "\" /\x7f\""},
		{"é", `"é"`},
		{"€😀", `"€😀"`},
		{"\u2028\u2029", "\"\u2028\u2029\""},
		{"\ufffd", "\"\ufffd\""},
		{"\xed\xa0\x80", `"\ud800"`},                          // lone high surrogate, WTF-8
		{"\xed\xbf\xbf", `"\udfff"`},                          // lone low surrogate
		{"a\xed\xb8\x80\xed\xa0\xbd", `"a\ude00\ud83d"`},      // low then high: no pair
		{"\xed\xa0\xbd\xed\xb8\x80", `"😀"`},                   // a pair in two halves
		{"\xed\xa0\xbd\xed\xa0\xbd\xed\xb8\x80", `"\ud83d😀"`}, // high, then a pair
		{"\xff", "\"\ufffd\""},                                // not UTF-8
		{"a\xc3", "\"a\ufffd\""},                              // cut short
		{"\xc0\x80", "\"\ufffd\ufffd\""},                      // overlong
		{"\xed\x9f\xbf", "\"\ud7ff\""},                        // just below the surrogates
		{"\xee\x80\x80", "\"\ue000\""},                        // just above
		{"\xed\xa0", "\"\ufffd\ufffd\""},                      // a surrogate cut short
		{"x\"\xed\xa0\x80\n\x01é", `"x\"\ud800\n\u0001é"`},
	}
	for _, tt := range tests {
		if got := string(Encode(String(tt.in))); got != tt.want {
			t.Errorf("Encode(String(%+q)) = %s; want %s", tt.in, got, tt.want)
		}
		if got := Size(String(tt.in)); got != len(tt.want) {
			t.Errorf("Size(String(%+q)) = %d; want %d", tt.in, got, len(tt.want))
		}
		o := NewObject(Member{tt.in, nil})
		if got, want := string(Encode(o)), "{"+tt.want+":null}"; got != want {
			t.Errorf("Encode of key %+q = %s; want %s", tt.in, got, want)
		}
	}
}

// TestStringSize pins the escaped size of each kind of character.
func TestStringSize(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 2},
		{"a", 3},
		{`"`, 4},
		{`\`, 4},
		{"\n", 4},
		{"\x1f", 8},
		{"\x7f", 3},
		{"é", 4},
		{"€", 5},
		{"😀", 6},
		{"\xed\xa0\x80", 8},             // lone surrogate: \ud800
		{"\xed\xa0\xbd\xed\xb8\x80", 6}, // pair: 😀
		{"\xff", 5},                     // U+FFFD
	}
	for _, tt := range tests {
		if got := stringSize(tt.in, math.MaxInt); got != tt.want {
			t.Errorf("stringSize(%+q) = %d; want %d", tt.in, got, tt.want)
		}
	}
	// Past the limit, stringSize stops early with a number above it.
	long := strings.Repeat("a", 1000)
	for _, limit := range []int{0, 1, 10, 1001} {
		if got := stringSize(long, limit); got <= limit || got > limit+6 {
			t.Errorf("stringSize(1000 a, %d) = %d; want just above %d", limit, got, limit)
		}
	}
	if got := stringSize(long, 1002); got != 1002 {
		t.Errorf("stringSize(1000 a, 1002) = %d; want 1002", got)
	}
}

func TestEncode(t *testing.T) {
	tests := []struct {
		in   Value
		want string
	}{
		{nil, `null`},
		{Bool(true), `true`},
		{Bool(false), `false`},
		{Array(nil), `[]`},
		{Array{}, `[]`},
		{Object{}, `{}`},
		{Array{nil, Bool(false), Number(-2), String("s"), Array{Array{}}, Object{}}, `[null,false,-2,"s",[[]],{}]`},
		{NewObject(Member{"", Array{nil}}, Member{"x", NewObject(Member{"y", Number(1e-7)})}), `{"":[null],"x":{"y":1e-7}}`},
		{Array{Number(math.NaN()), Number(math.Copysign(0, -1))}, `[null,0]`},
	}
	for _, tt := range tests {
		if got := string(Encode(tt.in)); got != tt.want {
			t.Errorf("Encode(%v) = %s; want %s", tt.in, got, tt.want)
		}
		if got := Size(tt.in); got != len(tt.want) {
			t.Errorf("Size(%v) = %d; want %d", tt.in, got, len(tt.want))
		}
	}
	if got, want := string(Append([]byte("x"), Array{Number(1)})), "x[1]"; got != want {
		t.Errorf("Append = %s; want %s", got, want)
	}
}

func TestKeyOrder(t *testing.T) {
	tests := []struct {
		keys []string
		want string
	}{
		{[]string{"b", "2", "1", "a"}, `{"1":1,"2":1,"b":1,"a":1}`},
		{[]string{"10", "9", "1", "0"}, `{"0":1,"1":1,"9":1,"10":1}`},
		{[]string{"x", "4294967294", "4294967295"}, `{"4294967294":1,"x":1,"4294967295":1}`},
		{[]string{"01", "-1", "1.5", "1e3", " 1", "1 ", "+1", "", "00"}, `{"01":1,"-1":1,"1.5":1,"1e3":1," 1":1,"1 ":1,"+1":1,"":1,"00":1}`},
		{[]string{"99999999999", "3", "42949672940"}, `{"3":1,"99999999999":1,"42949672940":1}`},
		{[]string{"c", "b", "a"}, `{"c":1,"b":1,"a":1}`},
	}
	for _, tt := range tests {
		var ms []Member
		for _, k := range tt.keys {
			ms = append(ms, Member{k, Number(1)})
		}
		if got := string(Encode(NewObject(ms...))); got != tt.want {
			t.Errorf("NewObject(%q) encodes as %s; want %s", tt.keys, got, tt.want)
		}
	}
}

func TestIsIndex(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"0", true},
		{"1", true},
		{"4294967294", true}, // 2^32−2
		{"4294967295", false},
		{"4294967296", false},
		{"9999999999", false},
		{"10000000000", false},
		{"", false},
		{"01", false},
		{"00", false},
		{"-1", false},
		{"-0", false},
		{"1.0", false},
		{"1e3", false},
		{"a1", false},
		{"1a", false},
	}
	for _, tt := range tests {
		if got := isIndex(tt.key); got != tt.want {
			t.Errorf("isIndex(%q) = %v; want %v", tt.key, got, tt.want)
		}
	}
}

// TestNewObjectDuplicates checks that a repeated key keeps its first
// position and takes its last value, in small and in large objects.
func TestNewObjectDuplicates(t *testing.T) {
	// With the four members added below, n keys make n+4 members: up to
	// smallObject, NewObject scans for keys, past it uses a map.
	for _, n := range []int{smallObject - 4, smallObject - 3, 100} {
		var ms []Member
		for i := range n {
			ms = append(ms, Member{string(rune('a'+i%26)) + strings.Repeat("x", i/26), Number(i)})
		}
		ms = append(ms, Member{"b", String("last b")}, Member{"7", Number(-7)}, Member{"7", Number(7)}, Member{"a", String("last a")})
		o := NewObject(ms...)
		if got, want := o.Len(), n+1; got != want {
			t.Errorf("n=%d: Len = %d; want %d", n, got, want)
		}
		var keys []string
		for k := range o.All() {
			keys = append(keys, k)
		}
		if want := []string{"7", "a", "b", "c"}; !slices.Equal(keys[:4], want) {
			t.Errorf("n=%d: keys begin %q; want %q", n, keys[:4], want)
		}
		for k, want := range map[string]Value{"a": String("last a"), "b": String("last b"), "7": Number(7), "c": Number(2)} {
			if got, ok := o.Get(k); !ok || got != want {
				t.Errorf("n=%d: Get(%q) = %v, %v; want %v, true", n, k, got, ok, want)
			}
		}
		if got, ok := o.Get("missing"); ok {
			t.Errorf("n=%d: Get(missing) = %v, true; want false", n, got)
		}
	}
}

func TestObjectAllStops(t *testing.T) {
	o := NewObject(Member{"a", nil}, Member{"b", nil})
	for k := range o.All() {
		if k != "a" {
			t.Errorf("All yielded %q after the loop broke", k)
		}
		break
	}
}
