package api

import (
	"net/http"
	"strings"
	"testing"
)

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"code":"1"}`, `{"code":1}`, `{"cod":1}`, `[`, `{"code":"1","code":"2"}`, "\"\xff\"", `{"wait_ms":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req executeRequest
		p := decodeJSON(data, &req)
		if p == nil {
			return
		}
		if p.Status != http.StatusBadRequest || p.Type != ProblemType+p.Code || p.Title == "" {
			t.Fatalf("%q: problem %+v", data, p)
		}
		switch p.Code {
		case CodeMalformedJSON, CodeUnknownField, CodeInvalid:
		default:
			t.Fatalf("%q: code %s", data, p.Code)
		}
	})
}

// TestDecodeSaysWhatIsWrongInJSONTerms: a member of the wrong type is named with the
// JSON value wanted, never a Go type.
func TestDecodeSaysWhatIsWrongInJSONTerms(t *testing.T) {
	for body, want := range map[string]string{
		`{"code":1}`:                 `member "/code": a string is wanted, not number`,
		`{"code":"1","wait_ms":"x"}`: `member "/wait_ms": an integer is wanted, not string`,
		`[1]`:                        `the body must be a JSON object`,
	} {
		var req executeRequest
		p := decodeJSON([]byte(body), &req)
		if p == nil || p.Detail != want || strings.Contains(p.Detail, "Go ") {
			t.Errorf("%s: %+v; want detail %q", body, p, want)
		}
	}
}
