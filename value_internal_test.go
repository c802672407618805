package kiln

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/perfstat"
)

// conversionTexts are about size bytes of JSON each: arrays nested size/2 deep,
// objects nested size/6 deep, and one array of numbers and strings.
func conversionTexts(size int) []struct{ name, text string } {
	mib := size
	nested := strings.Repeat("[", mib/2) + strings.Repeat("]", mib/2)
	deep := strings.Repeat(`{"a":`, mib/6) + "0" + strings.Repeat("}", mib/6)
	var wide strings.Builder
	wide.WriteByte('[')
	for i := 0; wide.Len() < mib; i++ {
		if i > 0 {
			wide.WriteByte(',')
		}
		if i%2 == 0 {
			wide.WriteString(strconv.Itoa(i))
		} else {
			wide.WriteString(`"s"`)
		}
	}
	wide.WriteByte(']')
	return []struct{ name, text string }{{"nested", nested}, {"deep", deep}, {"wide", wide.String()}}
}

// BenchmarkValueConversion measures what a binding's values cost: lossless.Decode of
// the text as the reference, the conversions each way, and a binding that echoes its
// arguments (both conversions, as a program's call takes them).
func BenchmarkValueConversion(b *testing.B) {
	echo := namespaceTo(Namespace{Global: "g", Funcs: map[string]Func{
		"echo": func(_ context.Context, args Value) (Value, error) { return args, nil },
	}}).Funcs["echo"]
	for _, c := range conversionTexts(1 << 20) {
		lv, err := lossless.Decode([]byte(c.text))
		if err != nil {
			b.Fatal(err)
		}
		pv, err := DecodeValue([]byte(c.text))
		if err != nil {
			b.Fatal(err)
		}
		for _, op := range []struct {
			name string
			run  func() error
		}{
			{"lossless-decode", func() error { _, err := lossless.Decode([]byte(c.text)); return err }},
			{"from", func() error { valueFrom(lv); return nil }},
			{"to", func() error { _, err := valueTo(pv); return err }},
			{"binding", func() error { _, err := echo(context.Background(), lv); return err }},
		} {
			b.Run(c.name+"/"+op.name, func(b *testing.B) {
				b.ReportAllocs()
				m := perfstat.Start()
				for b.Loop() {
					t0 := time.Now()
					if err := op.run(); err != nil {
						b.Fatal(err)
					}
					m.Add(time.Since(t0))
				}
				m.Report(b, b.N)
			})
		}
	}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestConversionCostsNoMoreThanDecoding checks that converting a value either way
// allocates no more than decoding its text did: the new containers, and no copies of
// them on the way. Before conversions took one pass, arrays nested 32Ki deep took 7.7
// times as much.
func TestConversionCostsNoMoreThanDecoding(t *testing.T) {
	for _, c := range conversionTexts(64 << 10) {
		var lv lossless.Value
		decoding := allocated(func() {
			var err error
			if lv, err = lossless.Decode([]byte(c.text)); err != nil {
				t.Fatal(err)
			}
		})
		var pv Value
		from := allocated(func() { pv = valueFrom(lv) })
		var back lossless.Value
		to := allocated(func() {
			var err error
			if back, err = valueTo(pv); err != nil {
				t.Fatal(err)
			}
		})
		if from > decoding || to > decoding {
			t.Errorf("%s: converting from lossless allocated %d bytes, to lossless %d; decoding %d", c.name, from, to, decoding)
		}
		if got := lossless.Encode(back); string(got) != c.text {
			t.Errorf("%s: the value converted there and back is %d bytes of JSON, not the %d of the text", c.name, len(got), len(c.text))
		}
	}
}

// FuzzDecodeValue checks that DecodeValue reads what lossless.Decode reads, and that
// EncodeValue writes it back as lossless.Encode does.
func FuzzDecodeValue(f *testing.F) {
	for _, seed := range []string{`null`, `[1,"a",{"b":[true,false]}]`, `{"2":1,"1":2,"x":{}}`, `"\ud800"`, `[[[[]]]]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lv, lerr := lossless.Decode(data)
		v, err := DecodeValue(data)
		if (err == nil) != (lerr == nil) {
			t.Fatalf("DecodeValue: %v; lossless.Decode: %v", err, lerr)
		}
		if err != nil {
			return
		}
		text, err := EncodeValue(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := lossless.Encode(lv); string(text) != string(want) {
			t.Fatalf("EncodeValue(DecodeValue(%q)) = %s; want %s", data, text, want)
		}
	})
}

// BenchmarkToolsetBinding is a program's call of a Go tool through a Toolset's
// namespace, with about 1 MiB of arguments that the tool echoes.
func BenchmarkToolsetBinding(b *testing.B) {
	ts, err := OpenToolset(context.Background(), ToolsetOptions{Tools: []Tool{{Namespace: "t", Name: "echo",
		Handler: func(_ context.Context, arguments []byte) (any, error) { return json.RawMessage(arguments), nil }}}})
	if err != nil {
		b.Fatal(err)
	}
	defer ts.Close()
	echo := programTo(Program{Namespaces: ts.Namespaces()}).Namespaces[0].Funcs["echo"]
	args, err := lossless.Decode([]byte(`{"a":` + conversionTexts(1 << 20)[2].text + `}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	m := perfstat.Start()
	for b.Loop() {
		t0 := time.Now()
		if _, err := echo(context.Background(), args); err != nil {
			b.Fatal(err)
		}
		m.Add(time.Since(t0))
	}
	m.Report(b, b.N)
}
