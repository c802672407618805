package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/go-json-experiment/json"
)

// vectors is conformance/envelopes.json, which the Python decoder runs too.
type vectors struct {
	Expect    Expect `json:"expect"`
	Envelopes []struct {
		Name       string `json:"name"`
		Payload    string `json:"payload"`
		PayloadHex string `json:"payload_hex"`
		Verdict    string `json:"verdict"`
		Reason     Reason `json:"reason"`
		Pointer    string `json:"pointer"`
	} `json:"envelopes"`
	Frames []struct {
		Name       string `json:"name"`
		Hex        string `json:"hex"`
		Verdict    string `json:"verdict"`
		PayloadHex string `json:"payload_hex"`
	} `json:"frames"`
}

func loadVectors(t testing.TB) vectors {
	t.Helper()
	data, err := os.ReadFile("../../conformance/envelopes.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(data, &v, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConformanceEnvelopes(t *testing.T) {
	v := loadVectors(t)
	if len(v.Envelopes) < 40 {
		t.Fatalf("only %d envelope vectors", len(v.Envelopes))
	}
	for _, c := range v.Envelopes {
		payload := []byte(c.Payload)
		if c.PayloadHex != "" {
			var err error
			if payload, err = hex.DecodeString(c.PayloadHex); err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
		}
		_, err := Decode(payload, v.Expect)
		switch c.Verdict {
		case "ok":
			if err != nil {
				t.Errorf("%s: got %v; want ok", c.Name, err)
			}
		case "error":
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Errorf("%s: got %v; want %s at %q", c.Name, err, c.Reason, c.Pointer)
				continue
			}
			if de.Reason != c.Reason || de.Pointer != c.Pointer {
				t.Errorf("%s: got %s at %q (%s); want %s at %q", c.Name, de.Reason, de.Pointer, de.Detail, c.Reason, c.Pointer)
			}
		default:
			t.Fatalf("%s: unknown verdict %q", c.Name, c.Verdict)
		}
	}
}

func TestConformanceFrames(t *testing.T) {
	for _, c := range loadVectors(t).Frames {
		stream, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := ReadFrame(bytes.NewReader(stream))
		var want error
		switch c.Verdict {
		case "ok":
			wantPayload, _ := hex.DecodeString(c.PayloadHex)
			if err != nil || !bytes.Equal(payload, wantPayload) {
				t.Errorf("%s: got %q, %v; want %q", c.Name, payload, err, wantPayload)
			}
			continue
		case "size":
			want = ErrFrameSize
		case "truncated":
			want = ErrTruncated
		case "eof":
			want = io.EOF
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v; want %v", c.Name, err, want)
		}
	}
}
