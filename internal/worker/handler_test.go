package worker

import (
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/wire"
)

// FuzzNewCall checks the method newCall reads without a parse against json.Unmarshal's
// reading of every valid request object.
func FuzzNewCall(f *testing.F) {
	for _, request := range []string{`{"method":"runtime.inspect"}`, `{"method":"a\"b"}`, `{"method":"x\u00e9","n":1}`,
		`{"method":7}`, `{"n":1,"method":"m"}`, `{"method":"m\\n"}`, `{ "method":"m"}`, `{"method":""}`, `{}`} {
		f.Add(request)
	}
	f.Fuzz(func(t *testing.T, request string) {
		if v := jsontext.Value(request); v.Kind() != '{' || !v.IsValid() {
			return // the decoder lets only valid objects through
		}
		var head struct {
			Method *string `json:"method"`
		}
		want := ""
		if json.Unmarshal([]byte(request), &head) == nil && head.Method != nil {
			want = *head.Method
		}
		if got := newCall(wire.HostRequest{Request: jsontext.Value(request)}, "g-1", true).Method; got != want {
			t.Fatalf("newCall(%s).Method = %q; want %q", request, got, want)
		}
	})
}
