package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestFrameAtAndPastTheLimit(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), MaxFrameSize)
	frame, err := AppendFrame(nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(bytes.NewReader(frame))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("a frame of %d bytes: %v", MaxFrameSize, err)
	}
	if _, err := AppendFrame(nil, append(payload, 'x')); !errors.Is(err, ErrFrameSize) {
		t.Errorf("a payload of %d bytes: got %v; want ErrFrameSize", MaxFrameSize+1, err)
	}
	if _, err := AppendFrame(nil, nil); !errors.Is(err, ErrFrameSize) {
		t.Errorf("an empty payload: got %v; want ErrFrameSize", err)
	}
}

// TestLengthIsCheckedBeforeThePayload reads a prefix announcing 1 MiB + 1 from a reader
// that would fail if anything past the prefix were read.
func TestLengthIsCheckedBeforeThePayload(t *testing.T) {
	r := &onlyPrefix{data: []byte{0x00, 0x10, 0x00, 0x01}}
	if _, err := ReadFrame(r); !errors.Is(err, ErrFrameSize) {
		t.Fatalf("got %v; want ErrFrameSize", err)
	}
	if r.readPast {
		t.Error("the reader read past the length prefix")
	}
}

type onlyPrefix struct {
	data     []byte
	readPast bool
}

func (r *onlyPrefix) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		r.readPast = true
		return 0, errors.New("read past the prefix")
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestEveryKindRoundTrips(t *testing.T) {
	errText := "Traceback"
	rev := strings.Repeat("f", 64)
	messages := []Message{
		Hello{Token: "t0", Role: RoleWorkbench, Slots: []string{}},
		Hello{Token: "t0", Role: RoleHooks, Revision: &rev, Slots: []string{"attention.plan", "delivery.review"}},
		Execute{ID: "c-1", Code: "print('é')\n"},
		Invoke{ID: "h-1", Slot: "delivery.review", Input: jsontext.Value(`{"text":"hi"}`)},
		HostRequest{ID: "r-1", ExecutionID: "c-1", Request: jsontext.Value(`{"method":"runtime.inspect"}`)},
		HostReply{ID: "r-1", ExecutionID: "c-1", Reply: Reply{Kind: ReplyOK, Value: jsontext.Value(`[1,{"a":null}]`)}},
		HostReply{ID: "r-1", ExecutionID: "c-1", Reply: Reply{Kind: ReplyError, Code: "unknown_method", Message: "no"}},
		Completed{ID: "c-1", Result: Result{Kind: ResultCell, Status: StatusOK, Output: []Output{{Stream: StreamResult, Text: "42"}}}},
		Completed{ID: "c-1", Result: Result{Kind: ResultCell, Status: StatusError, Output: []Output{}, TruncatedBytes: 7, Error: &errText}},
		Completed{ID: "h-1", Result: Result{Kind: ResultHook, Value: jsontext.Value(`{"action":"allow"}`)}},
		Display{ExecutionID: "c-1", Data: map[string]string{MIMEPlain: "<Figure>", MIMEPNG: "iVBORw0KGgo="}, Dropped: 1},
		Completed{ID: "h-1", Result: Result{Kind: ResultFailed, Error: &errText}},
		Interrupt{ID: "c-1"},
		Shutdown{},
	}
	want := Expect{SessionID: "root", Generation: "g-1"}
	for _, m := range messages {
		payload, err := Encode(Envelope{SessionID: "root", Generation: "g-1", Message: m})
		if err != nil {
			t.Fatalf("%s: %v", m.Kind(), err)
		}
		env, err := Decode(payload, want)
		if err != nil {
			t.Fatalf("%s: %s: %v", m.Kind(), payload, err)
		}
		if !reflect.DeepEqual(env.Message, m) {
			t.Errorf("%s: got %#v; want %#v", m.Kind(), env.Message, m)
		}
	}
}

func TestEncodeRefusesBadIdentity(t *testing.T) {
	if _, err := Encode(Envelope{SessionID: "bad id", Generation: "g-1", Message: Shutdown{}}); err == nil {
		t.Error("encoded an envelope with an invalid session id")
	}
}

func TestValidIdentifier(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"a", true}, {strings.Repeat("a", 128), true}, {strings.Repeat("a", 129), false}, {"", false},
		{"g-1", true}, {"a.b_c-D9", true}, {"a b", false}, {"é", false}, {"a/b", false}, {"a\x00", false},
	} {
		if got := ValidIdentifier(c.s); got != c.want {
			t.Errorf("ValidIdentifier(%q) = %v; want %v", c.s, got, c.want)
		}
	}
}

// The frame a host reads most, a host request, takes the plain path; were it to stop
// accepting it, every request would silently pay for the full judgement.
func TestThePlainPathTakesAHostRequest(t *testing.T) {
	want := Expect{SessionID: "s", Generation: "g-1"}
	payload := []byte(`{"version":1,"session_id":"s","generation":"g-1","message":{"kind":"host_request","id":"r-1","execution_id":"c-1","request":{"method":"runtime.inspect"}}}`)
	plain, ok := decodePlain(payload, want)
	judged, err := judge(payload, want)
	if !ok || err != nil || !reflect.DeepEqual(plain, judged) {
		t.Errorf("plain %v %#v; judged %v %#v", ok, plain, err, judged)
	}
}

// A completion at each of its limits is accepted, and one a step past each refused.
func TestACompletionAtAndPastItsLimits(t *testing.T) {
	want := Expect{SessionID: "s", Generation: "g-1"}
	completion := func(records int, text string, errText string) []byte {
		out := make([]string, records)
		for i := range out {
			out[i] = `{"stream":"stdout","text":"` + text + `"}`
		}
		return []byte(`{"version":1,"session_id":"s","generation":"g-1","message":{"kind":"completed","id":"c-1",` +
			`"result":{"kind":"cell","status":"error","output":[` + strings.Join(out, ",") + `],"truncated_bytes":0,"error":"` + errText + `"}}}`)
	}
	perRecord := strings.Repeat("x", MaxOutputBytes/MaxOutputRecords)
	for _, c := range []struct {
		name    string
		payload []byte
		ok      bool
	}{
		{"records at the limit, text at the limit", completion(MaxOutputRecords, perRecord, "e"), true},
		{"a record past the limit", completion(MaxOutputRecords+1, "", "e"), false},
		{"text a byte past the limit", completion(1, strings.Repeat("x", MaxOutputBytes+1), "e"), false},
		{"error at the limit", completion(1, "", strings.Repeat("e", MaxErrorBytes)), true},
		{"error a byte past the limit", completion(1, "", strings.Repeat("e", MaxErrorBytes+1)), false},
	} {
		if _, err := Decode(c.payload, want); (err == nil) != c.ok {
			t.Errorf("%s: %v; want accepted=%v", c.name, err, c.ok)
		}
	}
}
