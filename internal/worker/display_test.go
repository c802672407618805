package worker

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/wire"
)

// TestDisplayWithRealPython shows rich objects from a cell: display() and the final
// value carry their bundles, among the cell's printed text in the order the cell made
// them, the final value's bundle before its result; the chunks streamed are the record.
func TestDisplayWithRealPython(t *testing.T) {
	w := startWorker(t, Config{})
	var streamed []wire.Output
	rec, err := w.ExecuteStream(context.Background(), "c-1", `import sys
class H:
    def __repr__(self): return "H()"
    def _repr_html_(self): return "<b>h</b>"
    def _repr_png_(self): return b"\x89PNG"
print("first", end="")
display(H(), 7)
print("second", file=sys.stderr)
print("third")
H()`, func(o wire.Output) { streamed = append(streamed, o) })
	if err != nil {
		t.Fatal(err)
	}
	html := map[string]string{"text/plain": "H()", "text/html": "<b>h</b>", "image/png": "iVBORw=="}
	want := []wire.Output{{Stream: "stdout", Text: "first"},
		{Stream: "display", Data: html}, {Stream: "display", Data: map[string]string{"text/plain": "7"}},
		{Stream: "stderr", Text: "second\n"}, {Stream: "stdout", Text: "third\n"},
		{Stream: "display", Data: html}, {Stream: "result", Text: "H()"}}
	if rec.Status != wire.StatusOK || !equalOutputs(rec.Output, want) {
		t.Fatalf("got %s %v; want ok %v", rec.Status, rec.Output, want)
	}
	if !equalOutputs(streamed, want[:6]) {
		t.Errorf("streamed %v; want %v", streamed, want[:6])
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
	if got := rec.Output[8].Data["text/plain"]; !strings.HasPrefix(got, "Big(1000000)\n[display: text/html dropped") {
		t.Errorf("the ninth display is %q; want its text with a note", got)
	}
	if last := rec.Output[len(rec.Output)-1]; last.Stream != "stdout" || !strings.Contains(last.Text, "past the cell's 32 displays") {
		t.Errorf("the displays past the bound: %v; want them in stdout, after the displays", last)
	}
}

// TestDisplaysAmongTextAtTheBoundsWithRealPython fills both bounds at once: 256 text
// records, split by 32 displays, and the text past them counted; the record is what
// was streamed, displays in their places.
func TestDisplaysAmongTextAtTheBoundsWithRealPython(t *testing.T) {
	w := startWorker(t, Config{})
	var streamed []wire.Output
	rec, err := w.ExecuteStream(context.Background(), "c-1", `import sys
class H:
    def __repr__(self): return "H()"
    def _repr_html_(self): return "<i>h</i>"
for i in range(200):
    print(i)
    if i < 32:
        display(H())
    print(i, file=sys.stderr)`, func(o wire.Output) { streamed = append(streamed, o) })
	if err != nil {
		t.Fatal(err)
	}
	texts, displays := 0, 0
	for i, o := range rec.Output {
		switch o.Stream {
		case wire.StreamDisplay:
			displays++
			if i == 0 || rec.Output[i-1].Stream != wire.StreamStdout || rec.Output[i+1].Stream != wire.StreamStderr {
				t.Errorf("display at %d is not between its stdout and stderr", i)
			}
		case wire.StreamStdout, wire.StreamStderr:
			texts++
		}
	}
	if rec.Status != wire.StatusOK || texts != wire.MaxOutputRecords || displays != wire.MaxDisplayItems || rec.TruncatedBytes == 0 {
		t.Fatalf("got %s, %d text records, %d displays, %d bytes truncated; want ok, %d, %d and some",
			rec.Status, texts, displays, rec.TruncatedBytes, wire.MaxOutputRecords, wire.MaxDisplayItems)
	}
	if !equalOutputs(streamed, rec.Output) {
		t.Errorf("the chunks streamed are not the record")
	}
}

// TestCompletionMustPlaceTheDisplays checks a completion against what was streamed: its
// text, merged between displays and past result records, and its display places, where
// the displays came.
func TestCompletionMustPlaceTheDisplays(t *testing.T) {
	out := func(stream, text string) wire.Output { return wire.Output{Stream: stream, Text: text} }
	place := wire.Output{Stream: wire.StreamDisplay}
	shown := wire.Display{ExecutionID: "c", Data: map[string]string{"text/plain": "p"}}
	streamed := func(t *testing.T) *stream { // stdout "ab", a display, stderr "c"
		s := newStream(nil)
		for _, err := range []error{s.add(wire.OutputChunk{Stream: "stdout", Text: "a"}),
			s.add(wire.OutputChunk{Stream: "stdout", Text: "b"}), s.addDisplay(shown),
			s.add(wire.OutputChunk{Stream: "stderr", Text: "c"})} {
			if err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		output []wire.Output
		ok     bool
	}{
		{"as streamed", []wire.Output{out("stdout", "ab"), place, out("stderr", "c"), out("result", "1")}, true},
		{"split by a result", []wire.Output{out("stdout", "a"), out("result", "1"), out("stdout", "b"), place, out("stderr", "c")}, true},
		{"split by results", []wire.Output{out("stdout", "a"), out("result", "1"), out("result", "2"), out("stdout", "b"), place, out("stderr", "c")}, true},
		{"split without a result", []wire.Output{out("stdout", "a"), out("stdout", "b"), place, out("stderr", "c")}, false},
		{"an empty record", []wire.Output{out("stdout", "a"), out("stdout", ""), out("stdout", "b"), place, out("stderr", "c")}, false},
		{"an empty record after a result", []wire.Output{out("stdout", "a"), out("result", "1"), out("stdout", ""), out("result", "2"), out("stdout", "b"), place, out("stderr", "c")}, false},
		{"an empty record first", []wire.Output{out("stdout", ""), out("stdout", "ab"), place, out("stderr", "c")}, false},
		{"an empty record of another stream", []wire.Output{out("stdout", "ab"), out("stderr", ""), place, out("stderr", "c")}, false},
		{"an empty record last", []wire.Output{out("stdout", "ab"), place, out("stderr", "c"), out("stderr", "")}, false},
		{"split across a place", []wire.Output{out("stdout", "ab"), place, out("stderr", "c"), out("result", "1"), out("stdout", "b")}, false},
		{"no place", []wire.Output{out("stdout", "ab"), out("stderr", "c")}, false},
		{"the place early", []wire.Output{out("stdout", "a"), place, out("stdout", "b"), out("stderr", "c")}, false},
		{"the place late", []wire.Output{out("stdout", "ab"), out("stderr", "c"), place}, false},
		{"two places", []wire.Output{out("stdout", "ab"), place, place, out("stderr", "c")}, false},
		{"text missing", []wire.Output{out("stdout", "ab"), place}, false},
		{"text changed", []wire.Output{out("stdout", "aB"), place, out("stderr", "c")}, false},
		{"text added", []wire.Output{out("stdout", "ab"), place, out("stderr", "cd")}, false},
	} {
		got, err := streamed(t).fill(tc.output)
		if (err == nil) != tc.ok {
			t.Errorf("%s: got %v; want ok %v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok {
			for _, o := range got {
				if o.Stream == wire.StreamDisplay && o.Data["text/plain"] != "p" {
					t.Errorf("%s: the place is not filled: %v", tc.name, got)
				}
			}
		}
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

// TestTextBoundAmongDisplaysOnTheHost holds a worker to the text-record bound with
// displays between the records: they are not text records, and text after one starts a
// record. 256 records are accepted, more of the last one too; the 257th is refused,
// after a display or of another stream.
func TestTextBoundAmongDisplaysOnTheHost(t *testing.T) {
	shown := wire.Display{ExecutionID: "c", Data: map[string]string{"text/plain": "p"}}
	chunk := func(i int) wire.OutputChunk {
		return wire.OutputChunk{ExecutionID: "c", Stream: []string{wire.StreamStdout, wire.StreamStderr}[i%2], Text: "x"}
	}
	s := newStream(nil)
	for i := range wire.MaxOutputRecords {
		if i > wire.MaxOutputRecords-wire.MaxDisplayItems {
			if err := s.addDisplay(shown); err != nil {
				t.Fatalf("display before record %d: %v", i+1, err)
			}
		}
		if err := s.add(chunk(i)); err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
	}
	last := chunk(wire.MaxOutputRecords - 1)
	if err := s.add(last); err != nil {
		t.Fatalf("more of record %d: %v", wire.MaxOutputRecords, err)
	}
	if err := s.addDisplay(shown); err != nil {
		t.Fatalf("display %d: %v", wire.MaxDisplayItems, err)
	}
	if n := len(s.records); s.texts != wire.MaxOutputRecords || n != wire.MaxOutputRecords+wire.MaxDisplayItems {
		t.Fatalf("%d text records of %d; want %d of %d", s.texts, n, wire.MaxOutputRecords, wire.MaxOutputRecords+wire.MaxDisplayItems)
	}
	if _, err := s.fill(stripData(s.records)); err != nil {
		t.Errorf("the completion as streamed: %v", err)
	}
	if err := s.add(last); err == nil {
		t.Errorf("record %d, after a display, accepted", wire.MaxOutputRecords+1)
	}
	if err := s.add(chunk(wire.MaxOutputRecords)); err == nil {
		t.Errorf("record %d, of another stream, accepted", wire.MaxOutputRecords+1)
	}
}

// FuzzFill checks a completion against what was streamed, both written as records
// split by "|", each a kind (o stdout, e stderr, r result, d display) and its text. fill
// must accept exactly the completions whose text records are not empty, are split only
// by result records, and, results set aside and merged by stream, are the streamed
// records; and it must fill each place with its display.
func FuzzFill(f *testing.F) {
	for _, seed := range [][2]string{{"oa|ob|dp|ec", "oab|d|ec|r1"}, {"oa|ob|dp|ec", "oa|r1|ob|d|ec"},
		{"oa|ob|dp|ec", "oa|ob|d|ec"}, {"oab|dp|ec", "oa|o|ob|d|ec"}, {"oab|dp|ec", "oa|r|o|r|ob|d|ec"},
		{"oab|dp|ec", "oa|d|ob|ec"}, {"dp|dq|ox", "d|d|ox|r"}, {"ex|oy|ex", "ex|r|oy|ex"}, {"oab|dp|ec", "oaB|d|ec"},
		{"oab|dp|ec", "oab|d"}} {
		f.Add(seed[0], seed[1])
	}
	parse := func(script string) []wire.Output {
		var out []wire.Output
		for _, item := range strings.Split(script, "|") {
			if item == "" {
				continue
			}
			stream := map[byte]string{'o': wire.StreamStdout, 'e': wire.StreamStderr,
				'r': wire.StreamResult, 'd': wire.StreamDisplay}[item[0]]
			if stream != "" {
				out = append(out, wire.Output{Stream: stream, Text: item[1:]})
			}
		}
		return out
	}
	f.Fuzz(func(t *testing.T, streamed, completion string) {
		s := newStream(nil)
		for _, o := range parse(streamed) {
			var err error
			switch o.Stream {
			case wire.StreamDisplay:
				err = s.addDisplay(wire.Display{ExecutionID: "c", Data: map[string]string{"text/plain": o.Text}})
			case wire.StreamStdout, wire.StreamStderr:
				err = s.add(wire.OutputChunk{ExecutionID: "c", Stream: o.Stream, Text: o.Text})
			}
			if err != nil {
				return // a breach: the generation ends, nothing is filled
			}
		}
		output := parse(completion)
		want := true
		for i, o := range output {
			switch {
			case o.Stream == wire.StreamDisplay:
				output[i].Text = "" // a place carries nothing
			case o.Stream == wire.StreamResult:
			case o.Text == "" || i > 0 && output[i-1].Stream == o.Stream:
				want = false
			}
		}
		want = want && equalOutputs(mergeText(output), stripData(s.records))
		got, err := s.fill(output)
		if (err == nil) != want {
			t.Fatalf("fill(%q) after %q: %v; want ok %v", completion, streamed, err, want)
		}
		if err == nil && !equalOutputs(mergeText(got), s.records) {
			t.Fatalf("fill(%q) after %q gives %v; want %v, results aside", completion, streamed, got, s.records)
		}
		if _, err := s.fill(stripData(s.records)); err != nil {
			t.Fatalf("the records streamed, %q, refused as a completion: %v", streamed, err)
		}
	})
}

// mergeText returns output without its result records, its text merged by stream
// between displays.
func mergeText(output []wire.Output) []wire.Output {
	var merged []wire.Output
	for _, o := range output {
		switch n := len(merged); {
		case o.Stream == wire.StreamResult:
		case n > 0 && o.Stream != wire.StreamDisplay && merged[n-1].Stream == o.Stream:
			merged[n-1].Text += o.Text
		default:
			merged = append(merged, o)
		}
	}
	return merged
}

// stripData returns records with each display reduced to its place.
func stripData(records []wire.Output) []wire.Output {
	places := slices.Clone(records)
	for i := range places {
		places[i].Data = nil
	}
	return places
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

// TestDisplayValuesTheHostRefusesAreDropped: a display item whose value the host would
// refuse (base64 with trailing bits set, which a lenient decoder accepts; text that is
// not JSON under application/json) is left out of the bundle, a lone surrogate becomes
// U+FFFD, and the cell and its namespace go on.
func TestDisplayValuesTheHostRefusesAreDropped(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-1", `x = 1
class P:
    def __repr__(self): return "P"
    def _repr_png_(self): return "AB=="
    def _repr_jpeg_(self): return "AA=="
P()`)
	want := []wire.Output{{Stream: "display", Data: map[string]string{"text/plain": "P", "image/jpeg": "AA=="}},
		{Stream: "result", Text: "P"}}
	if rec.Status != wire.StatusOK || rec.NamespaceLost || !equalOutputs(rec.Output, want) {
		t.Fatalf("got %s (lost %v) %v, error %q; want ok %v", rec.Status, rec.NamespaceLost, rec.Output, errText(rec), want)
	}
	rec = execute(t, w, "c-2", `class S:
    def __repr__(self): return "S\udc00"
    def _repr_html_(self): return "<b>\ud800</b>"
    def _repr_json_(self): return '{"a": 1, "a": 2}'
display(S())
class J:
    def __repr__(self): return "J"
    def _repr_json_(self): return "[1, NaN]"
    def _repr_svg_(self): return "<svg/>"
J()`)
	want = []wire.Output{
		{Stream: "display", Data: map[string]string{"text/plain": "S\uFFFD", "text/html": "<b>\uFFFD</b>"}},
		{Stream: "display", Data: map[string]string{"text/plain": "J", "image/svg+xml": "<svg/>"}},
		{Stream: "result", Text: "J"}}
	if rec.Status != wire.StatusOK || rec.NamespaceLost || !equalOutputs(rec.Output, want) {
		t.Fatalf("got %s (lost %v) %v, error %q; want ok %v", rec.Status, rec.NamespaceLost, rec.Output, errText(rec), want)
	}
	if rec := execute(t, w, "c-3", "x"); rec.Status != wire.StatusOK || rec.Generation != "g-1" {
		t.Errorf("the next cell: got %s in %s %v; want ok in g-1", rec.Status, rec.Generation, rec.Output)
	}
}
