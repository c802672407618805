package api

import (
	"net/http"
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
