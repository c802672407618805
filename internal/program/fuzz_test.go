package program

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"

	"github.com/kilnrt/kiln/internal/lossless"
)

// appendChildFrame writes f as the child would: the inverse of ParseChildFrame.
func appendChildFrame(f Frame) []byte {
	m := []lossless.Member{}
	add := func(k string, v lossless.Value) { m = append(m, lossless.Member{Key: k, Value: v}) }
	switch f := f.(type) {
	case BootAck:
		add("type", lossless.String(TypeBootAck))
	case Log:
		add("type", lossless.String(TypeLog))
		add("text", lossless.String(f.Text))
		if f.Truncated {
			add("truncated", lossless.Bool(true))
		}
		if f.Open {
			add("open", lossless.Bool(true))
		}
	case Call:
		add("type", lossless.String(TypeCall))
		add("id", lossless.Number(f.ID))
		add("global", lossless.String(f.Global))
		add("name", lossless.String(f.Name))
		add("args", f.Args)
	case Done:
		add("type", lossless.String(TypeDone))
		if f.Error != nil {
			add("error", lossless.NewObject(
				lossless.Member{Key: "kind", Value: lossless.String(f.Error.Kind)},
				lossless.Member{Key: "message", Value: lossless.String(f.Error.Message)}))
		} else if f.HasValue {
			add("value", f.Value)
		}
	}
	return lossless.Encode(lossless.NewObject(m...))
}

// FuzzChildFrame feeds any line to the validator: it never panics, drops junk with
// ErrJunk, and what it accepts obeys the frame rules and survives being written and
// read again unchanged.
func FuzzChildFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"boot-ack"}`,
		`{"type":"log","text":"x","truncated":true,"open":true}`,
		`{"type":"log","text":"x","truncated":"yes"}`,
		`{"type":"call","id":0,"global":"tools","name":"search","args":{"q":"x"}}`,
		`{"type":"call","id":-0,"global":"g","name":"n","args":null}`,
		`{"type":"call","id":1,"global":"g","name":"n","args":[1e400]}`,
		`{"type":"done","value":[[[]]]}`,
		`{"type":"done","error":{"kind":"exception","message":"m"}}`,
		`{"type":"done","error":{"kind":"exception","message":5}}`,
		`{"type":"done","error":null}`,
		`{"type":"done","value":9007199254740993}`,
		"{\"type\":\"log\",\"text\":\"\xff\"}",
		`{"type":"log","text":"\ud800\udc00\ud800"}`,
		`not json`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, err := ParseChildFrame(line)
		if err != nil {
			if !errors.Is(err, ErrJunk) {
				t.Fatalf("error %v does not wrap ErrJunk", err)
			}
			if len(line) > 8 && bytes.Contains([]byte(err.Error()), line) {
				t.Fatalf("the error %q echoes the line", err)
			}
			return
		}
		switch fr := fr.(type) {
		case Call:
			if math.IsNaN(fr.ID) || math.IsInf(fr.ID, 0) || fr.ID == 0 && math.Signbit(fr.ID) {
				t.Fatalf("call id %v", fr.ID)
			}
			if lossless.Lossy(fr.Args) {
				t.Fatalf("lossy args %s", lossless.Encode(fr.Args))
			}
		case Done:
			if e := fr.Error; e != nil && e.Kind != StatusException && e.Kind != StatusInvalidOutput && e.Kind != StatusOutputLimit {
				t.Fatalf("done error kind %q", e.Kind)
			}
			if fr.Error != nil && fr.HasValue {
				t.Fatal("done with both an error and a value")
			}
		}
		again := appendChildFrame(fr)
		fr2, err := ParseChildFrame(again)
		if lossy := func() bool { d, ok := fr.(Done); return ok && lossless.Lossy(d.Value) }(); lossy {
			return // a lossy done value does not survive JSON: the host rejects it later
		}
		if err != nil {
			t.Fatalf("ParseChildFrame(%s), rewritten from %q: %v", again, line, err)
		}
		if !sameFrame(fr, fr2) {
			t.Fatalf("%q read as %#v, written as %s, read back as %#v", line, fr, again, fr2)
		}
	})
}

// FuzzLineReader splits any input under a small cap: every line it returns is within
// the cap, and the lines it returns are the input's, in order.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), 3)
	f.Add([]byte("toolongline\nx\n"), 4)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 1 || max > 1<<10 {
			return
		}
		lr := newLineReader(bytes.NewReader(data), max)
		var got [][]byte
		for {
			line, err := lr.next()
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatal(err)
				}
				break
			}
			if len(line) > max {
				t.Fatalf("a line of %d bytes under a cap of %d", len(line), max)
			}
			got = append(got, bytes.Clone(line))
		}
		want := bytes.Split(data, []byte("\n"))
		if len(got) > len(want)-1 {
			t.Fatalf("%d lines from %q", len(got), data)
		}
		for i, line := range got {
			if !bytes.Equal(line, want[i]) {
				t.Fatalf("line %d = %q; want %q", i, line, want[i])
			}
		}
	})
}

// FuzzReply writes any decoded value as a reply and reads it back: the value
// survives exactly, however deep, and the frame is one line.
func FuzzReply(f *testing.F) {
	for _, s := range []string{`null`, `[1,2.5,"x"]`, `{"b":1,"2":[],"a":{"c":"\ud800"}}`, `1152921504606846976`, `1e21`, `5e-324`, `[[[[[[]]]]]]`, `"\u0000\n"`} {
		f.Add([]byte(s), "message")
	}
	f.Fuzz(func(t *testing.T, text []byte, msg string) {
		v, err := lossless.Decode(text)
		if err != nil || lossless.Lossy(v) {
			return
		}
		for _, r := range []Reply{{ID: 9, OK: true, Value: v}, {ID: 10, Message: msg}} {
			line := AppendReply(nil, r)
			if bytes.IndexByte(line, '\n') != len(line)-1 {
				t.Fatalf("the reply %q is not one line", line)
			}
			back, err := lossless.Decode(line[:len(line)-1])
			if err != nil {
				t.Fatalf("Decode(%q): %v", line, err)
			}
			obj := back.(lossless.Object)
			if r.OK {
				got, _ := obj.Get("value")
				if !bytes.Equal(lossless.Encode(got), lossless.Encode(v)) {
					t.Fatalf("value %s came back as %s", lossless.Encode(v), lossless.Encode(got))
				}
			} else if got, _ := obj.Get("message"); got == nil {
				t.Fatal("no message")
			}
		}
	})
}
