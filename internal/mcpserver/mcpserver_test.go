package mcpserver

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/serve"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestTailAtTheLimit(t *testing.T) {
	at := strings.Repeat("a", MaxTailBytes)
	if got, cut := tail(at, MaxTailBytes); got != at || cut != 0 {
		t.Errorf("at the limit: cut %d", cut)
	}
	past := "b" + at
	if got, cut := tail(past, MaxTailBytes); got != at || cut != 1 {
		t.Errorf("one past: %d bytes kept, %d cut", len(got), cut)
	}
	multi := "é" + strings.Repeat("a", MaxTailBytes-1) // "é" is 2 bytes: one of them would be cut
	got, cut := tail(multi, MaxTailBytes)
	if !utf8.ValidString(got) || cut != 2 || len(got)+cut != len(multi) {
		t.Errorf("a character across the cut: %d kept, %d cut", len(got), cut)
	}
}

func TestAnswerCountsWhatItLeavesOut(t *testing.T) {
	out := `[{"stream":"stdout","text":"` + strings.Repeat("x", MaxTailBytes+10) + `"},{"stream":"result","text":"1"}]`
	res, x := answer(serve.Record{ID: "s:c-1", Session: "s", Cell: "c-1", Status: "ok", Output: []byte(out), TruncatedBytes: 5})
	if x.TruncatedBytes != 15 || x.ValueRepr != "1" || len(x.StdoutTail) != MaxTailBytes {
		t.Fatalf("answer: %d truncated, %q, %d", x.TruncatedBytes, x.ValueRepr, len(x.StdoutTail))
	}
	if len(res.Content) != 2 {
		t.Fatalf("no resource link: %v", res.Content)
	}
}

func TestAnswerCutsEachDisplaysText(t *testing.T) {
	at := strings.Repeat("p", MaxPlainBytes)
	out := `[{"stream":"display","data":{"text/plain":"` + at + `","image/png":"iVBORw=="}},` +
		`{"stream":"display","data":{"text/plain":"q` + at + `"}}]`
	res, x := answer(serve.Record{ID: "s:c-2", Session: "s", Cell: "c-2", Status: "ok", Output: []byte(out)})
	if len(x.Displays) != 2 || x.TruncatedBytes != 1 {
		t.Fatalf("answer: %+v", x)
	}
	if d := x.Displays[0]; d.TextPlain != at || d.MIMEType != "image/png" || d.Link != "kiln://sessions/s/executions/c-2/display/0" {
		t.Errorf("at the limit: %+v", d)
	}
	if d := x.Displays[1]; d.TextPlain != at || d.MIMEType != "text/plain" {
		t.Errorf("one past: %d bytes, %s", len(d.TextPlain), d.MIMEType)
	}
	// The text copy, the record link (output was cut) and a link per display.
	if len(res.Content) != 4 {
		t.Fatalf("content: %v", res.Content)
	}
	if l, ok := res.Content[2].(*mcp.ResourceLink); !ok || l.URI != x.Displays[0].Link || l.MIMEType != "image/png" {
		t.Errorf("link: %v", res.Content[2])
	}
}

func TestAnswerCutsTheException(t *testing.T) {
	at := strings.Repeat("v", MaxTailBytes)
	exc := `{"type":"ValueError","value":"` + at + `","traceback":"t` + at + `"}`
	_, x := answer(serve.Record{ID: "s:c-3", Session: "s", Cell: "c-3", Status: "error", Output: []byte(`[]`), Exception: []byte(exc)})
	if e := x.Exception; e == nil || e.Type != "ValueError" || e.Value != at || e.Traceback != at || x.TruncatedBytes != 1 {
		t.Fatalf("answer: %+v, %d truncated; want the value at the limit whole, the traceback one past cut by 1", e, x.TruncatedBytes)
	}
	if _, x := answer(serve.Record{ID: "s:c-4", Session: "s", Cell: "c-4", Status: "ok", Exception: []byte(`null`)}); x.Exception != nil {
		t.Fatalf("no exception: %+v", x.Exception)
	}
}
