package linediff

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

func TestLines(t *testing.T) {
	tests := []struct {
		text string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{"\n", []string{"\n"}},
		{"a\nb\n", []string{"a\n", "b\n"}},
		{"a\nb", []string{"a\n", "b"}},
		{"a\r\n\r\nb", []string{"a\r\n", "\r\n", "b"}},
		{"\n\n", []string{"\n", "\n"}},
	}
	for _, tt := range tests {
		got := Lines(tt.text)
		if len(got) != len(tt.want) || (len(got) > 0 && !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("Lines(%q) = %q, want %q", tt.text, got, tt.want)
		}
		if joined := strings.Join(got, ""); joined != tt.text {
			t.Errorf("join(Lines(%q)) = %q", tt.text, joined)
		}
	}
}

// patch builds a Patch for source "s".
func patch(start int, old, new []string) Patch {
	return Patch{Source: "s", StartLine: start, OldLines: old, NewLines: new}
}

// none is an empty line list, as Diff reports one.
var none = []string{}

func TestDiff(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     []Patch
	}{
		{"equal", "a\nb\n", "a\nb\n", []Patch{}},
		{"both empty", "", "", []Patch{}},
		{"insert at start", "b\nc\n", "a\nb\nc\n",
			[]Patch{patch(1, none, []string{"a\n"})}},
		{"insert in middle", "a\nc\n", "a\nb\nc\n",
			[]Patch{patch(2, none, []string{"b\n"})}},
		{"insert at end", "a\nb\n", "a\nb\nc\n",
			[]Patch{patch(3, none, []string{"c\n"})}},
		{"delete", "a\nb\nc\n", "a\nc\n",
			[]Patch{patch(2, []string{"b\n"}, none)}},
		{"replace", "a\nb\nc\n", "a\nB\nc\n",
			[]Patch{patch(2, []string{"b\n"}, []string{"B\n"})}},
		{"replace one line by two", "a\nb\nc\n", "a\nx\ny\nc\n",
			[]Patch{patch(2, []string{"b\n"}, []string{"x\n", "y\n"})}},
		{"two hunks", "a\nb\nc\nd\ne\n", "a\nB\nc\nd\n", []Patch{
			patch(2, []string{"b\n"}, []string{"B\n"}),
			patch(5, []string{"e\n"}, none),
		}},
		{"old lacks final newline", "a\nb", "a\nb\n",
			[]Patch{patch(2, []string{"b"}, []string{"b\n"})}},
		{"new lacks final newline", "a\nb\n", "a\nb",
			[]Patch{patch(2, []string{"b\n"}, []string{"b"})}},
		{"append after unterminated line", "a", "a\nb",
			[]Patch{patch(1, []string{"a"}, []string{"a\n", "b"})}},
		{"empty old", "", "a\nb\n",
			[]Patch{patch(1, none, []string{"a\n", "b\n"})}},
		{"empty new", "a\nb\n", "",
			[]Patch{patch(1, []string{"a\n", "b\n"}, none)}},
		{"CRLF to LF", "a\r\nb\r\n", "a\nb\r\n",
			[]Patch{patch(1, []string{"a\r\n"}, []string{"a\n"})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Diff("s", tt.old, tt.new)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Diff(%q, %q) =\n%#v\nwant\n%#v", tt.old, tt.new, got, tt.want)
			}
			applied, err := Apply(tt.old, got)
			if err != nil || applied != tt.new {
				t.Fatalf("Apply(%q, Diff) = %q, %v; want %q", tt.old, applied, err, tt.new)
			}
		})
	}
}

func TestApply(t *testing.T) {
	const base = "a\nb\nc\n"
	tests := []struct {
		name    string
		patches []Patch
		want    string
	}{
		{"no patches", nil, base},
		{"append", []Patch{patch(4, nil, []string{"d\n"})}, "a\nb\nc\nd\n"},
		{"insert then replace at the same line", []Patch{
			patch(2, nil, []string{"x\n"}),
			patch(2, []string{"b\n"}, []string{"B\n"}),
		}, "a\nx\nB\nc\n"},
		{"adjacent replacements", []Patch{
			patch(1, []string{"a\n"}, []string{"A\n"}),
			patch(2, []string{"b\n", "c\n"}, nil),
		}, "A\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Apply(base, tt.patches)
			if err != nil || got != tt.want {
				t.Fatalf("Apply = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestApplyRefuses(t *testing.T) {
	const base = "a\nb\nc\n"
	tests := []struct {
		name    string
		patches []Patch
		want    string // the whole error message
	}{
		{"old lines mismatch",
			[]Patch{patch(2, []string{"b\n", "x\n"}, nil)},
			`linediff: patch 0: line 3 mismatch: base has "c\n", patch expects "x\n"`},
		{"line ending mismatch",
			[]Patch{patch(1, []string{"a\r\n"}, nil)},
			`linediff: patch 0: line 1 mismatch: base has "a\n", patch expects "a\r\n"`},
		{"start line zero",
			[]Patch{patch(0, nil, []string{"x\n"})},
			"linediff: patch 0: start line 0 out of range 1..4"},
		{"start line past the end",
			[]Patch{patch(1, []string{"a\n"}, nil), patch(5, nil, []string{"x\n"})},
			"linediff: patch 1: start line 5 out of range 1..4"},
		{"old lines past the end",
			[]Patch{patch(3, []string{"c\n", "d\n"}, nil)},
			"linediff: patch 0: old lines 3-4 run past the end of the base (3 lines)"},
		{"out of order",
			[]Patch{patch(3, []string{"c\n"}, nil), patch(1, []string{"a\n"}, nil)},
			"linediff: patch 1: out of order: start line 1 precedes patch 0's start line 3"},
		{"overlapping",
			[]Patch{patch(1, []string{"a\n", "b\n"}, nil), patch(2, []string{"b\n"}, nil)},
			"linediff: patch 1: overlapping: start line 2 falls within patch 0's old lines 1-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Apply(base, tt.patches)
			if err == nil {
				t.Fatalf("Apply = %q, nil; want error %q", got, tt.want)
			}
			if err.Error() != tt.want {
				t.Fatalf("Apply error = %q, want %q", err, tt.want)
			}
		})
	}
}

// bigText returns n numbered lines, each distinct.
func bigText(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d: follow the instructions of the workspace\n", i)
	}
	return lines
}

// editBig returns a copy of lines with 10 edits 1,000 lines apart: inserted,
// deleted and replaced lines in turn.
func editBig(lines []string) []string {
	var out []string
	for i, line := range lines {
		switch {
		case i%1000 != 500 || i/1000 >= 10:
			out = append(out, line)
		case i/1000%3 == 0:
			out = append(out, "inserted\n", line)
		case i/1000%3 == 1:
			// deleted
		default:
			out = append(out, fmt.Sprintf("replaced %d\n", i))
		}
	}
	return out
}

func TestDiffBigText(t *testing.T) {
	lines := bigText(20000)
	old, new := strings.Join(lines, ""), strings.Join(editBig(lines), "")
	patches := Diff("s", old, new)
	if len(patches) != 10 {
		t.Fatalf("Diff gave %d patches, want 10: %v", len(patches), patches)
	}
	for _, p := range patches {
		if n := len(p.OldLines) + len(p.NewLines); n > 2 {
			t.Errorf("patch at line %d changes %d lines, want at most 2", p.StartLine, n)
		}
	}
	if got, err := Apply(old, patches); err != nil || got != new {
		t.Fatalf("Apply(old, Diff(old, new)) = %d bytes, %v; want new (%d bytes)", len(got), err, len(new))
	}
}

func BenchmarkDiff(b *testing.B) {
	lines := bigText(20000)
	old, new := strings.Join(lines, ""), strings.Join(editBig(lines), "")
	for b.Loop() {
		Diff("s", old, new)
	}
}

func TestPatchJSON(t *testing.T) {
	patches := Diff("AGENTS.md", "a\nb\n", "a\n")
	data, err := json.Marshal(patches[0])
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"source":"AGENTS.md","start_line":2,"old_lines":["b\n"],"new_lines":[]}`
	if string(data) != want {
		t.Fatalf("json.Marshal = %s, want %s", data, want)
	}
	var back Patch
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, patches[0]) {
		t.Fatalf("json round trip = %#v, want %#v", back, patches[0])
	}
}

// TestDiffMinimal checks Diff against a dynamic-programming edit distance on
// random texts over few distinct lines, where many edit scripts compete.
func TestDiffMinimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	randomText := func() string {
		var sb strings.Builder
		for range r.IntN(30) {
			sb.WriteString([]string{"a\n", "b\n", "c\n", "d"}[r.IntN(4)])
		}
		return sb.String()
	}
	for range 2000 {
		old, new := randomText(), randomText()
		checkDiff(t, old, new)
	}
}

// checkDiff checks that Diff(old, new) is well formed, minimal and applies
// to old to give new.
func checkDiff(t *testing.T, old, new string) {
	t.Helper()
	patches := Diff("s", old, new)
	edits := 0
	for i, p := range patches {
		if p.OldLines == nil || p.NewLines == nil {
			t.Fatalf("Diff(%q, %q): patch %d has nil lines: %#v", old, new, i, p)
		}
		if len(p.OldLines)+len(p.NewLines) == 0 {
			t.Fatalf("Diff(%q, %q): patch %d is empty", old, new, i)
		}
		if i > 0 && p.StartLine <= patches[i-1].StartLine+len(patches[i-1].OldLines) {
			t.Fatalf("Diff(%q, %q): patch %d does not follow patch %d after an unchanged line: %#v",
				old, new, i, i-1, patches)
		}
		edits += len(p.OldLines) + len(p.NewLines)
	}
	got, err := Apply(old, patches)
	if err != nil || got != new {
		t.Fatalf("Apply(%q, Diff(%q, %q)) = %q, %v; want %q", old, old, new, got, err, new)
	}
	if a, b := Lines(old), Lines(new); len(a)*len(b) <= 1<<16 {
		if want := editDistance(a, b); edits != want {
			t.Fatalf("Diff(%q, %q) makes %d line edits, want the minimum %d", old, new, edits, want)
		}
	}
}

// editDistance returns the fewest line insertions and deletions that turn a
// into b, by dynamic programming.
func editDistance(a, b []string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := range a {
		diag := row[0]
		row[0] = i + 1
		for j := range b {
			next := min(row[j+1], row[j]) + 1
			if a[i] == b[j] {
				next = diag
			}
			diag, row[j+1] = row[j+1], next
		}
	}
	return row[len(b)]
}

func FuzzDiffApply(f *testing.F) {
	f.Add("", "")
	f.Add("", "a\n")
	f.Add("a\nb\nc\n", "a\nc\n")
	f.Add("a\nb", "a\nb\n")
	f.Add("a\r\nb\r\n", "a\nb\n")
	f.Add("x\x00y\n\xff\xfe\n", "x\x00y\n\xc3\x28\n")
	f.Add("a\na\na\nb\n", "b\na\na\n")
	f.Add("one\ntwo\nthree\nfour\nfive\n", "zero\none\nthree\nfour!\nfive\nsix")
	f.Fuzz(func(t *testing.T, old, new string) {
		checkDiff(t, old, new)
		if patches := Diff("s", old, old); len(patches) != 0 {
			t.Fatalf("Diff(x, x) = %#v for x = %q, want no patches", patches, old)
		}
	})
}
