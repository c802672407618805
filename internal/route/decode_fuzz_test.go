package route

import (
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzReadResponse holds the Responses API reader to never panic, and to keep the first
// call only.
func FuzzReadResponse(f *testing.F) {
	f.Add(`{"model":"m","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]},` +
		`{"type":"function_call","call_id":"c","name":"python","arguments":"{\"code\":\"1\"}"}],"usage":{"input_tokens":3,"output_tokens":1}}`)
	f.Add(`{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[],"usage":null}`)
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := readResponse(raw)
		if err == nil && r.Call != nil && r.Call.Problem == "" && len(r.Call.Code) > MaxCodeBytes {
			t.Fatalf("code of %d bytes accepted", len(r.Call.Code))
		}
	})
}

// FuzzMergeUsage holds the stream usage merge to give valid JSON whose members are the
// start's and the delta's.
func FuzzMergeUsage(f *testing.F) {
	f.Add(`{"input_tokens":1,"output_tokens":1}`, `{"output_tokens":9}`)
	f.Add(`{"input_tokens":1}`, `{"input_tokens":null}`)
	f.Fuzz(func(t *testing.T, start, delta string) {
		s, d := jsontext.Value(start), jsontext.Value(delta)
		if !s.IsValid() || !d.IsValid() {
			return
		}
		merged, err := mergeUsage(s, d)
		if err == nil && merged != nil && !merged.IsValid() {
			t.Fatalf("merged %q and %q into invalid %q", start, delta, merged)
		}
	})
}

// FuzzMember holds the member reader to never panic.
func FuzzMember(f *testing.F) {
	f.Add(`{"usage":{"a":1},"b":2}`, "usage")
	f.Fuzz(func(t *testing.T, raw, name string) {
		if v := member(raw, name); v != nil && !v.IsValid() {
			t.Fatalf("member %q of %q is invalid: %q", name, raw, v)
		}
	})
}
