package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzReadFrame feeds arbitrary streams to the frame reader: it must never panic, never
// return a payload outside 1..MaxFrameSize, and fail only with the errors it documents.
func FuzzReadFrame(f *testing.F) {
	for _, c := range loadVectors(f).Frames {
		stream, _ := hex.DecodeString(c.Hex)
		f.Add(stream)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bytes.NewReader(stream)
		for {
			payload, err := ReadFrame(r)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrFrameSize) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(payload) == 0 || len(payload) > MaxFrameSize {
				t.Fatalf("payload of %d bytes", len(payload))
			}
		}
	})
}

// FuzzDecode feeds arbitrary payloads to the envelope decoder: it must never panic, must
// refuse with a *DecodeError, and what it accepts must encode to a payload it accepts
// again as the same envelope. What the plain path accepts, the full judgement accepts
// too, as the same envelope.
func FuzzDecode(f *testing.F) {
	v := loadVectors(f)
	for _, c := range v.Envelopes {
		if c.PayloadHex != "" {
			payload, _ := hex.DecodeString(c.PayloadHex)
			f.Add(payload)
		} else if len(c.Payload) < 4096 {
			f.Add([]byte(c.Payload))
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		env, err := Decode(payload, v.Expect)
		if plain, ok := decodePlain(payload, v.Expect); ok {
			judged, err := judge(payload, v.Expect)
			if err != nil || !reflect.DeepEqual(normalize(plain), normalize(judged)) {
				t.Fatalf("the plain path accepted %q as %#v; the full judgement gives %#v, %v", payload, plain, judged, err)
			}
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			return
		}
		again, err := Encode(env)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", payload, err)
		}
		back, err := Decode(again, v.Expect)
		if err != nil {
			t.Fatalf("re-encoded %q is refused: %v", again, err)
		}
		if !reflect.DeepEqual(normalize(env), normalize(back)) {
			t.Fatalf("round trip changed the envelope:\n%#v\n%#v", env, back)
		}
	})
}

// normalize compacts the raw JSON values an envelope carries, so that two encodings of
// one value compare equal.
func normalize(env Envelope) Envelope {
	compact := func(v []byte) []byte {
		var b bytes.Buffer
		if len(v) == 0 {
			return nil
		}
		if err := jsonCompact(&b, v); err != nil {
			return v
		}
		return b.Bytes()
	}
	switch m := env.Message.(type) {
	case Invoke:
		m.Input = compact(m.Input)
		env.Message = m
	case HostRequest:
		m.Request = compact(m.Request)
		env.Message = m
	case HostReply:
		m.Reply.Value = compact(m.Reply.Value)
		env.Message = m
	case Completed:
		m.Result.Value = compact(m.Result.Value)
		env.Message = m
	}
	return env
}

func jsonCompact(dst *bytes.Buffer, src []byte) error {
	v := jsontext.Value(bytes.Clone(src))
	if err := v.Compact(); err != nil {
		return err
	}
	dst.Write(v)
	return nil
}

// FuzzEncodeOKReply checks that an ok reply's own encoder writes exactly the bytes the
// general encoder writes, and refuses exactly what it refuses.
func FuzzEncodeOKReply(f *testing.F) {
	for _, seed := range []string{`1`, `null`, ``, ` {"a": [1, 2.50, "\u00e9", "\/"]} `, `"\ud800"`,
		`{"a":1,"a":2}`, `[`, `"<>&` + "\u2028" + `"`, "\"\xff\"", `1 2`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		env := Envelope{SessionID: "s", Generation: "g-1", Message: HostReply{ID: "r-1", ExecutionID: "c-1",
			Reply: Reply{Kind: ReplyOK, Value: value}}}
		fast, fastErr := Encode(env)
		general, generalErr := encodeGeneral(env)
		if (fastErr == nil) != (generalErr == nil) || !bytes.Equal(fast, general) {
			t.Fatalf("value %q: own encoder %q (%v); general %q (%v)", value, fast, fastErr, general, generalErr)
		}
	})
}
