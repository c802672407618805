package mcpserver

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/serve"
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
