package lossless

import (
	"math"
	"strings"
	"testing"
)

func TestUnsafeInteger(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`9007199254740991`, false}, // 2^53−1
		{`9007199254740992`, false}, // 2^53
		{`9007199254740993`, true},  // 2^53+1
		{`9007199254740994`, false}, // 2^53+2
		{`-9007199254740991`, false},
		{`-9007199254740992`, false},
		{`-9007199254740993`, true},
		{`18446744073709551615`, true},  // 2^64−1
		{`18446744073709551616`, false}, // 2^64
		{`18446744073709551617`, true},
		{`1152921504606846976`, false}, // 2^60
		{`1152921504606847000`, true},  // String(2**60), which rounds
		{`99999999999999991611392`, false},
		{`100000000000000000000000`, true}, // 1e23 is not a double
		{`1000000000000000000000`, false},  // 1e21 is
		{`179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368`, false}, // the largest double
		{`179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858369`, true},
		{`179769313486231590772930519078902473361797697894230657273430081157732675805500963132708477322407536021120113879871393357658789768814416622492847430639474124377767893424865485276302219601246094119453082952085005768838150682342462881473913110540827237163350510684586298239947245938479716304835356329624224137216`, true}, // 2^1024: an infinity
		{"1" + strings.Repeat("0", 400), true},
		{`0`, false},
		{`-0`, false},
		{`[1, -2, 9007199254740993]`, true},
		{`{"a": 9007199254740993}`, true},
		{`{"a":9007199254740993}`, true},
		{`9007199254740993.0`, false}, // a fraction: never checked
		{`9007199254740993e0`, false}, // an exponent: never checked
		{`9007199254740993E0`, false},
		{`1e400`, false},
		{`1.5e9007199254740993`, false},
		{`[1.5, 9007199254740993]`, true},
		{`"9007199254740993"`, false}, // in a string
		{`{"9007199254740993": 1}`, false},
		{`"\"9007199254740993"`, false},
		{`"\\" 9007199254740993`, true},
		{`["a\\\"", 9007199254740993]`, true},
		{`["\\\\", 9007199254740993]`, true},
		{`"9007199254740993`, false},
		{`-`, false},
		{``, false},
		{`true`, false},
	}
	for _, tt := range tests {
		if got := UnsafeInteger([]byte(tt.in)); got != tt.want {
			t.Errorf("UnsafeInteger(%.60s) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

func TestLossy(t *testing.T) {
	negZero := Number(math.Copysign(0, -1))
	tests := []struct {
		in   Value
		want bool
	}{
		{nil, false},
		{Number(0), false},
		{Number(5e-324), false},
		{Number(math.MaxFloat64), false},
		{negZero, true},
		{Number(math.NaN()), true},
		{Number(math.Inf(1)), true},
		{Number(math.Inf(-1)), true},
		{Array{Number(1), Array{Array{negZero}}}, true},
		{NewObject(Member{"a", Number(1)}, Member{"b", NewObject(Member{"c", Number(math.NaN())})}), true},
		{NewObject(Member{"a", String("-0")}, Member{"NaN", Array{}}), false},
	}
	for _, tt := range tests {
		if got := Lossy(tt.in); got != tt.want {
			t.Errorf("Lossy(%s) = %v; want %v", Encode(tt.in), got, tt.want)
		}
	}
}

func TestCheck(t *testing.T) {
	nan := Number(math.NaN())
	big := String(strings.Repeat("x", 100)) // 102 bytes
	tests := []struct {
		in    Value
		limit int
		want  error
	}{
		{nil, 4, nil},
		{nil, 3, ErrTooLarge},
		{String("é"), 4, nil}, // "é" is 1+2+1 bytes
		{String("é"), 3, ErrTooLarge},
		{String("\xed\xa0\x80"), 8, nil}, // "\ud800"
		{String("\xed\xa0\x80"), 7, ErrTooLarge},
		{Array{Number(1), Number(22)}, 6, nil}, // [1,22]
		{Array{Number(1), Number(22)}, 5, ErrTooLarge},
		{NewObject(Member{"k", String("v")}), 9, nil}, // {"k":"v"}
		{NewObject(Member{"k", String("v")}), 8, ErrTooLarge},
		{nan, 4, ErrLossy},
		{nan, 3, ErrTooLarge},
		{Array{nan, big}, 1000, ErrLossy},
		// Too large wins over lossy, whichever comes first.
		{Array{nan, big}, 100, ErrTooLarge},
		{Array{big, nan}, 100, ErrTooLarge},
		{NewObject(Member{"a", nan}, Member{"b", big}), 100, ErrTooLarge},
		{NewObject(Member{"b", big}, Member{"a", nan}), 100, ErrTooLarge},
		{Array{Array{Array{nan}}, Array{big}}, 100, ErrTooLarge},
		{Array{nan, Array{Number(1), Number(2)}}, 12, ErrLossy}, // [null,[1,2]]
		{Array{nan, Array{Number(1), Number(2)}}, 11, ErrTooLarge},
		{Array{nan, NewObject(Member{"x", big})}, 115, ErrLossy},
		{Array{nan, NewObject(Member{"x", big})}, 114, ErrTooLarge},
		{Array{Number(math.Copysign(0, -1))}, 3, ErrLossy},
		{Array{Number(math.Copysign(0, -1))}, 2, ErrTooLarge},
		{Number(1), 0, ErrTooLarge},
		{Number(1), -1, ErrTooLarge},
	}
	for _, tt := range tests {
		if got := Check(tt.in, tt.limit); got != tt.want {
			t.Errorf("Check(%.40s, %d) = %v; want %v", Encode(tt.in), tt.limit, got, tt.want)
		}
	}
}

// TestCheckExact checks at the limit and one under it for values of many
// shapes: a value of n bytes fits a limit of n, not n−1.
func TestCheckExact(t *testing.T) {
	for _, text := range []string{
		`null`, `[]`, `{}`, `[[],{}]`, `[null,true,false]`, `"\u0000\ud800é😀"`,
		`{"a":{"b":[1,2,{"c":"d"}]},"e":-1.5e-7}`,
		`{"":0}`, `{"":0,"":1}`, `["",""]`, `[0,0,0,0]`,
	} {
		v, err := Decode([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		n := len(Encode(v))
		if got := Size(v); got != n {
			t.Errorf("Size(%s) = %d; want %d", text, got, n)
		}
		if err := Check(v, n); err != nil {
			t.Errorf("Check(%s, %d) = %v; want nil", text, n, err)
		}
		if err := Check(v, n-1); err != ErrTooLarge {
			t.Errorf("Check(%s, %d) = %v; want ErrTooLarge", text, n-1, err)
		}
	}
}

// TestCheckEarly checks that Check rejects a container that cannot fit
// before walking its elements: measure stops with the bytes of its brackets,
// commas and colons and the least its elements could add.
func TestCheckEarly(t *testing.T) {
	huge := make(Array, 1_000_000)
	members := make([]Member, 1000)
	for i := range members {
		members[i] = Member{strings.Repeat("k", i), nil}
	}
	obj := NewObject(members...)
	tests := []struct {
		in    Value
		limit int
		want  int
	}{
		{huge, 1000, 2*len(huge) + 1},                   // [ ] 9,999,999 commas, 1 byte each
		{Array{Number(1), huge}, 1000, 2*len(huge) + 5}, // [1, then huge
		{obj, 1000, 1 + 5*obj.Len()},                    // { } commas colons, `""` and 1 byte each
		{Array{Number(1), Number(2), Number(3)}, 6, 7},  // [ ] 2 commas, 3 bytes
		{NewObject(Member{"a", nil}, Member{"b", nil}), 10, 11},
	}
	for _, tt := range tests {
		if n, _ := measure(tt.in, tt.limit); n != tt.want {
			t.Errorf("measure(%.20s…, %d) = %d; want %d", Encode(tt.in), tt.limit, n, tt.want)
		}
		if err := Check(tt.in, tt.limit); err != ErrTooLarge {
			t.Errorf("Check(%.20s…, %d) = %v; want ErrTooLarge", Encode(tt.in), tt.limit, err)
		}
	}
}

func TestExact(t *testing.T) {
	tests := []struct {
		digits string
		want   bool
	}{
		{"", true},
		{"0", true},
		{"000", true},
		{"9007199254740993", false},
		{"0000000000000000000000009007199254740992", true},
		{"0000000000000000000000009007199254740993", false},
		{"9223372036854775807", false}, // 2^63−1
		{"9223372036854775808", true},  // 2^63
		{"9223372036854775809", false},
		{"9223372036854774784", true}, // 2^63−1024
		{"9223372036854775296", false},
		{"1" + strings.Repeat("0", 22), true},
		{"1" + strings.Repeat("0", 23), false},
		{"1" + strings.Repeat("0", 330), false},
		{strings.Repeat("0", 400) + "1", true},
	}
	for _, tt := range tests {
		if got := exact([]byte(tt.digits)); got != tt.want {
			t.Errorf("exact(%.40s) = %v; want %v", tt.digits, got, tt.want)
		}
	}
}

// TestNoAllocs checks that the raw scan and the string meter do not allocate.
func TestNoAllocs(t *testing.T) {
	text := []byte(`{"a\"b": [9007199254740993, 1.5e300, "x"], "c": 18446744073709551616` + strings.Repeat("7", 300) + `}`)
	if n := testing.AllocsPerRun(10, func() { UnsafeInteger(text) }); n != 0 {
		t.Errorf("UnsafeInteger allocates %v times; want 0", n)
	}
	s := strings.Repeat("é\x01\"\xed\xa0\x80😀\xff", 100)
	if n := testing.AllocsPerRun(10, func() { stringSize(s, math.MaxInt) }); n != 0 {
		t.Errorf("stringSize allocates %v times; want 0", n)
	}
	if n := testing.AllocsPerRun(10, func() { numberSize(-1.2345678901234567e-300) }); n != 0 {
		t.Errorf("numberSize allocates %v times; want 0", n)
	}
}
