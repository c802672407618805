package lossless

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestDecode decodes JSON texts and checks what Encode writes back, which
// is what JSON.stringify(JSON.parse(in)) gives in JavaScript, but for the
// integers past 2^53 that Append writes in full.
func TestDecode(t *testing.T) {
	tests := []struct{ in, want string }{
		{`null`, `null`},
		{` true `, `true`},
		{"\t\n\r false", `false`},
		{`0`, `0`},
		{`-0`, `0`},
		{`1.0`, `1`},
		{`-1.5e3`, `-1500`},
		{`1E+2`, `100`},
		{`1e-7`, `1e-7`},
		{`123456789012345678901234567890`, `123456789012345677877719597056`},
		{`9007199254740993`, `9007199254740992`}, // rounds, as JSON.parse does; see UnsafeInteger
		{`1e400`, `null`},                        // Infinity
		{`-1e400`, `null`},
		{`1e-400`, `0`},
		{`""`, `""`},
		{`"a\"\\\/\b\f\n\r\t"`, `"a\"\\/\b\f\n\r\t"`},
		{`"\u0041\u00e9\u20AC"`, `"Aé€"`},
		{`"\u0000\u001F\u007f"`, `"\u0000\u001f` + "\x7f" + `"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\uD83D\uDE00"`, `"😀"`},
		{`"\ud83d"`, `"\ud83d"`},
		{`"\ude00\ud83d"`, `"\ude00\ud83d"`},
		{`"\ud83d\ud83d\ude00"`, `"\ud83d😀"`},
		{`"\ud83dx\ude00"`, `"\ud83dx\ude00"`},
		{`"\ud83d\n"`, `"\ud83d\n"`},
		{"\"\u2028\u2029\"", "\"\u2028\u2029\""},
		{`[]`, `[]`},
		{`[ ]`, `[]`},
		{`{ }`, `{}`},
		{`[1, [2, [3, {}]], {"a": []}]`, `[1,[2,[3,{}]],{"a":[]}]`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"a":1,"b":2,"a":3}`, `{"a":3,"b":2}`},
		{`{"b":1,"2":1,"1":1,"a":1}`, `{"1":1,"2":1,"b":1,"a":1}`},
		{`{"\u0061":1,"a":2}`, `{"a":2}`},
		{`{"__proto__":1}`, `{"__proto__":1}`},
	}
	for _, tt := range tests {
		v, err := Decode([]byte(tt.in))
		if err != nil {
			t.Errorf("Decode(%#q): %v", tt.in, err)
			continue
		}
		if got := string(Encode(v)); got != tt.want {
			t.Errorf("Encode(Decode(%#q)) = %#q; want %#q", tt.in, got, tt.want)
		}
	}
}

func TestDecodeValues(t *testing.T) {
	v, err := Decode([]byte(`[-0, "\ud800", {"k": [true]}, -1e-400]`))
	if err != nil {
		t.Fatal(err)
	}
	a := v.(Array)
	for _, i := range []int{0, 3} {
		if f := float64(a[i].(Number)); f != 0 || !math.Signbit(f) {
			t.Errorf("element %d decoded as %v; want negative zero", i, f)
		}
	}
	if got, want := a[1].(String), String("\xed\xa0\x80"); got != want {
		t.Errorf(`"\ud800" decoded as %q; want %q`, got, want)
	}
	k, ok := a[2].(Object).Get("k")
	if !ok || len(k.(Array)) != 1 || k.(Array)[0] != Bool(true) {
		t.Errorf("Get(k) = %v, %v; want [true], true", k, ok)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		in     string
		offset int
	}{
		{``, 0},
		{`   `, 3},
		{`nul`, 3},
		{`nulL`, 3},
		{`True`, 0},
		{`NaN`, 0},
		{`Infinity`, 0},
		{`-Infinity`, 1},
		{`+1`, 0},
		{`01`, 1},
		{`-01`, 2},
		{`00`, 1},
		{`1.`, 2},
		{`.5`, 0},
		{`1.e5`, 2},
		{`1e`, 2},
		{`1e+`, 3},
		{`-`, 1},
		{`0x10`, 1},
		{`1 2`, 2},
		{`[1,]`, 3},
		{`[,1]`, 1},
		{`[1 2]`, 3},
		{`[1`, 2},
		{`[`, 1},
		{`]`, 0},
		{`[}`, 1},
		{`{]`, 1},
		{`{"a"}`, 4},
		{`{"a":}`, 5},
		{`{"a":1,}`, 7},
		{`{a:1}`, 1},
		{`{'a':1}`, 1},
		{`{"a":1 "b":2}`, 7},
		{`{1:1}`, 1},
		{"{\"\x01\":1}", 2},
		{`{"a`, 3},
		{`{"a":1]`, 6},
		{`[1}`, 2},
		{`"abc`, 4},
		{`"\x"`, 2},
		{`"\u12"`, 5},
		{`"\u12G4"`, 5},
		{`"\u12`, 5},
		{`"\ud800\u`, 9},
		{`"\ud800\udc0`, 12},
		{`"\`, 2},
		{"\"\x01\"", 1},
		{"\"\n\"", 1},
		{"\"\x7f\xff\"", 2},
		{"\"\xc3\"", 1},
		{"\"\xed\xa0\x80\"", 1}, // a raw surrogate is not UTF-8
		{"\"\xc0\x80\"", 1},     // overlong
		{"\xef\xbb\xbf1", 0},    // byte order mark
		{"\x001", 0},
		{"1\x00", 1},
		{"[1]\n[2]", 4},
		{"\v1", 0},
		{"\u00a01", 0},
	}
	for _, tt := range tests {
		v, err := Decode([]byte(tt.in))
		var se *SyntaxError
		if !errors.As(err, &se) || !errors.Is(err, ErrSyntax) {
			t.Errorf("Decode(%#q) = %v, %v; want a *SyntaxError", tt.in, v, err)
			continue
		}
		if se.Offset != tt.offset {
			t.Errorf("Decode(%#q): %v; got offset %d; want %d", tt.in, err, se.Offset, tt.offset)
		}
	}
}

func TestDecodeErrorText(t *testing.T) {
	_, err := Decode([]byte(`[1,]`))
	if got, want := err.Error(), `lossless: invalid JSON at offset 3: unexpected ']', want value`; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}

// TestDecodeLong decodes arrays and objects longer than a block of the
// decoder's stacks, begun at offsets in a block other than its first.
func TestDecodeLong(t *testing.T) {
	var b strings.Builder
	list := func(n int) {
		b.WriteString("[")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprint(&b, i)
		}
		b.WriteString("]")
	}
	b.WriteString(`[1,2,3,`)
	list(2*blockSize + 5)
	b.WriteString(`,{"a":1,"b":`)
	list(blockSize)
	for i := range 2*blockSize + 7 {
		fmt.Fprintf(&b, `,"k%d":`, i)
		list(i % 3)
	}
	b.WriteString(`},`)
	list(blockSize - 1)
	b.WriteString(`]`)
	text := b.String()
	v, err := Decode([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(Encode(v)); got != text {
		t.Errorf("Encode(Decode(text)) differs from text")
	}
}

// deep is the depth of the deepest values tested: a recursive walk would
// exhaust a goroutine's stack well before it.
const deep = 1_000_000

// TestDeep decodes, encodes, measures and checks a 1,000,000-deep array.
func TestDeep(t *testing.T) {
	text := strings.Repeat("[", deep) + strings.Repeat("]", deep)
	v, err := Decode([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(Encode(v)); got != text {
		t.Errorf("Encode(Decode(text)) differs from text")
	}
	if got := Size(v); got != len(text) {
		t.Errorf("Size = %d; want %d", got, len(text))
	}
	if err := Check(v, len(text)); err != nil {
		t.Errorf("Check(v, %d) = %v; want nil", len(text), err)
	}
	if err := Check(v, len(text)-1); err != ErrTooLarge {
		t.Errorf("Check(v, %d) = %v; want ErrTooLarge", len(text)-1, err)
	}
	if Lossy(v) {
		t.Errorf("Lossy = true; want false")
	}
}

func TestDeepObject(t *testing.T) {
	text := strings.Repeat(`{"a":`, deep) + "-0" + strings.Repeat("}", deep)
	v, err := Decode([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := text[:len(text)-deep-2] + "0" + text[len(text)-deep:]
	if got := string(Encode(v)); got != want {
		t.Errorf("Encode(Decode(text)) differs from want")
	}
	if got := Size(v); got != len(want) {
		t.Errorf("Size = %d; want %d", got, len(want))
	}
	if !Lossy(v) {
		t.Errorf("Lossy = false; want true")
	}
	if err := Check(v, len(want)); err != ErrLossy {
		t.Errorf("Check = %v; want ErrLossy", err)
	}
}

// TestDecodeUntil checks that a closed stop channel ends the decoding of a long text
// with ErrStopped, and that an open one leaves it whole.
func TestDecodeUntil(t *testing.T) {
	t.Parallel()
	text := []byte("[" + strings.Repeat("1,", 3*stopEvery) + "1]")
	stop := make(chan struct{})
	v, err := DecodeUntil(text, stop)
	if a, ok := v.(Array); err != nil || !ok || len(a) != 3*stopEvery+1 {
		t.Fatalf("open stop: %d elements, %v; want all", len(a), err)
	}
	close(stop)
	if _, err := DecodeUntil(text, stop); !errors.Is(err, ErrStopped) {
		t.Fatalf("closed stop: %v; want ErrStopped", err)
	}
	if v, err := DecodeUntil([]byte("[1]"), stop); err != nil || len(v.(Array)) != 1 {
		t.Fatalf("a short text under a closed stop: %v, %v; want it decoded", v, err)
	}
}

// TestStackAcrossBlocks pushes, pops and drops across block edges.
func TestStackAcrossBlocks(t *testing.T) {
	t.Parallel()
	var s stack[int]
	for i := range 3*blockSize + 5 {
		s.push(i)
	}
	for range blockSize + 10 {
		s.drop()
	}
	for i := range 20 {
		s.push(-i)
	}
	if got, want := s.len(), 2*blockSize+15; got != want {
		t.Fatalf("len %d; want %d", got, want)
	}
	out := s.pop(blockSize - 3)
	if len(out) != blockSize+18 || out[0] != blockSize-3 || out[blockSize-3] != 2*blockSize-6 || out[blockSize-2] != 0 || out[len(out)-1] != -19 {
		t.Fatalf("popped %d elements, first %d, last %d", len(out), out[0], out[len(out)-1])
	}
	if *s.top() != blockSize-4 {
		t.Fatalf("top %d; want %d", *s.top(), blockSize-4)
	}
}
