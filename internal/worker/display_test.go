package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/wire"
)

// TestDisplayWithRealPython shows rich objects from a cell: display() and the final
// value carry their bundles, after the cell's printed text and before its result.
func TestDisplayWithRealPython(t *testing.T) {
	w := startWorker(t, Config{})
	var streamed []wire.Output
	rec, err := w.ExecuteStream(context.Background(), "c-1", `
class H:
    def __repr__(self): return "H()"
    def _repr_html_(self): return "<b>h</b>"
    def _repr_png_(self): return b"\x89PNG"
print("first")
display(H(), 7)
H()`, func(o wire.Output) { streamed = append(streamed, o) })
	if err != nil {
		t.Fatal(err)
	}
	html := map[string]string{"text/plain": "H()", "text/html": "<b>h</b>", "image/png": "iVBORw=="}
	want := []wire.Output{{Stream: "stdout", Text: "first\n"},
		{Stream: "display", Data: html}, {Stream: "display", Data: map[string]string{"text/plain": "7"}},
		{Stream: "display", Data: html}, {Stream: "result", Text: "H()"}}
	if rec.Status != wire.StatusOK || !equalOutputs(rec.Output, want) {
		t.Fatalf("got %s %v; want ok %v", rec.Status, rec.Output, want)
	}
	if !equalOutputs(streamed, want[:4]) {
		t.Errorf("streamed %v; want %v", streamed, want[:4])
	}
	if rec.DisplayDropped != 0 {
		t.Errorf("display_dropped %d; want 0", rec.DisplayDropped)
	}
}

// TestDisplayBoundsWithRealPython passes both display bounds from a cell: an item over
// the bytes keeps its text, counted; past the item bound the text goes to stdout.
func TestDisplayBoundsWithRealPython(t *testing.T) {
	w := startWorker(t, Config{})
	rec, err := w.Execute(context.Background(), "c-1", `
class Big:
    def __init__(self, n): self.n = n
    def __repr__(self): return f"Big({self.n})"
    def _repr_html_(self): return "x" * self.n
for i in range(9):
    display(Big(1000000))
for i in range(30):
    display(1)
`)
	if err != nil {
		t.Fatal(err)
	}
	displays := 0
	for _, o := range rec.Output {
		if o.Stream == wire.StreamDisplay {
			displays++
		}
	}
	if rec.Status != wire.StatusOK || displays != wire.MaxDisplayItems {
		t.Fatalf("got %s with %d displays; want ok with %d", rec.Status, displays, wire.MaxDisplayItems)
	}
	if rec.DisplayDropped != 1 {
		t.Errorf("display_dropped %d; want 1", rec.DisplayDropped)
	}
	if got := rec.Output[9].Data["text/plain"]; !strings.HasPrefix(got, "Big(1000000)\n[display: text/html dropped") {
		t.Errorf("the ninth display is %q; want its text with a note", got)
	}
	if rec.Output[0].Stream != "stdout" || !strings.Contains(rec.Output[0].Text, "past the cell's 32 displays") {
		t.Errorf("the displays past the bound: %v; want them in stdout", rec.Output[0])
	}
}

// TestDisplayBoundsOnTheHost holds a worker to the display bounds at the limit and one past.
func TestDisplayBoundsOnTheHost(t *testing.T) {
	plain := func(n int) wire.Display {
		return wire.Display{ExecutionID: "c", Data: map[string]string{"text/plain": strings.Repeat("x", n)}}
	}
	s := newStream(nil)
	for range wire.MaxDisplayItems {
		if err := s.addDisplay(plain(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.addDisplay(plain(1)); err == nil {
		t.Errorf("display %d accepted", wire.MaxDisplayItems+1)
	}
	s = newStream(nil)
	if err := s.addDisplay(plain(wire.MaxDisplayBytes)); err != nil {
		t.Fatalf("%d bytes: %v", wire.MaxDisplayBytes, err)
	}
	if err := s.addDisplay(plain(1)); err == nil {
		t.Errorf("%d bytes accepted", wire.MaxDisplayBytes+1)
	}
}

func equalOutputs(a, b []wire.Output) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Stream != b[i].Stream || a[i].Text != b[i].Text || len(a[i].Data) != len(b[i].Data) {
			return false
		}
		for k, v := range a[i].Data {
			if b[i].Data[k] != v {
				return false
			}
		}
	}
	return true
}
