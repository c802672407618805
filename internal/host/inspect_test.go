package host

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
)

// FuzzInspectionJSON checks the hand-made encoding of runtime.inspect's reply against
// json.Marshal of the same members: the same text, or an error from both.
func FuzzInspectionJSON(f *testing.F) {
	f.Add("c-1", "g-1", int64(1796047800123), int64(1796047800120), "", "r-1", 12, "root")
	f.Add("c\"1", "g<&>", int64(-1), int64(0), "event:1 event:22", "r\u2028", -3, "sess\xffion")
	f.Fuzz(func(t *testing.T, execution, generation string, nowMS, asOfMS int64, refs, request string, made int, session string) {
		in := inspection{ExecutionID: execution, Generation: generation, Now: time.UnixMilli(nowMS),
			PendingAsOf: time.UnixMilli(asOfMS), PendingInputs: strings.Fields(refs), RequestID: request,
			RequestsLimit: MaxRequestsPerCell, RequestsMade: made, SessionID: session}
		if in.PendingInputs == nil {
			in.PendingInputs = []string{}
		}
		want, wantErr := json.Marshal(struct {
			ExecutionID   string   `json:"execution_id"`
			Generation    string   `json:"generation"`
			Now           string   `json:"now"`
			NowMS         int64    `json:"now_ms"`
			PendingAsOfMS int64    `json:"pending_as_of_ms"`
			PendingInputs []string `json:"pending_inputs"`
			RequestID     string   `json:"request_id"`
			RequestsLimit int      `json:"requests_limit"`
			RequestsMade  int      `json:"requests_made"`
			SessionID     string   `json:"session_id"`
		}{in.ExecutionID, in.Generation, Stamp(in.Now), nowMS, asOfMS, in.PendingInputs, in.RequestID,
			in.RequestsLimit, in.RequestsMade, in.SessionID})
		got, err := in.appendJSON(nil)
		if (err != nil) != (wantErr != nil) || err == nil && string(got) != string(want) {
			t.Fatalf("appendJSON: %s, %v\njson.Marshal: %s, %v", got, err, want, wantErr)
		}
	})
}

func TestDecodeReadsParametersWithOrWithoutAny(t *testing.T) {
	type params struct {
		N int `json:"n"`
	}
	for _, c := range []struct {
		body string
		want params
		ok   bool
	}{
		{`{"method":"m"}`, params{N: 7}, true}, // nothing to read: the defaults stay
		{`{"method":"m","n":2}`, params{N: 2}, true},
		{`{"n":3,"method":"m"}`, params{N: 3}, true},
		{`{"method":"m","x":1}`, params{N: 7}, false},
		{`{"method":"m\u0020"}`, params{N: 7}, true}, // another method's body, read in full
	} {
		q := &Request{Method: "m", Body: []byte(c.body)}
		got := params{N: 7}
		err := q.Decode(&got)
		if (err == nil) != c.ok || err == nil && got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v (ok %v)", c.body, got, err, c.want, c.ok)
		}
	}
	var m map[string]any
	if err := (&Request{Method: "m", Body: []byte(`{"method":"m"}`)}).Decode(&m); err != nil || m == nil || len(m) != 0 {
		t.Errorf("into a map: %v, %v; want an empty map", m, err)
	}
}

// strictParams refuses every parameter object, {} among them.
type strictParams struct{}

func (*strictParams) UnmarshalJSON([]byte) error { return errors.New("refused") }

// textParams reads itself from a JSON string, so an object is wrong for it.
type textParams struct{ s string }

func (p *textParams) UnmarshalText(b []byte) error { p.s = string(b); return nil }

func TestDecodeLetsAParameterTypeJudgeEvenNoParameters(t *testing.T) {
	for _, body := range []string{`{"method":"m"}`, `{"method": "m"}`} { // read plainly, and in full
		var p strictParams
		if err := (&Request{Method: "m", Body: []byte(body)}).Decode(&p); err == nil {
			t.Errorf("%s: a parameter type with its own JSON reading was not asked", body)
		}
		var q textParams
		if err := (&Request{Method: "m", Body: []byte(body)}).Decode(&q); err == nil {
			t.Errorf("%s: a parameter type read from text took an object", body)
		}
	}
}
