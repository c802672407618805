// Package linediff records revisions of a text as line patches against the
// previous revision, and applies them back with verification.
//
// Diff compares two texts line by line, each line a whole string including
// its "\n", with Myers' O(ND) algorithm ("An O(ND) Difference Algorithm and
// Its Variations", 1986), in its linear-space form: the time is O((N+M)D)
// for texts of N and M lines that differ by D inserted or deleted lines, so
// small edits to long texts are cheap. The resulting edit script is minimal,
// and each run of deleted and inserted lines becomes one Patch, without
// context lines.
//
// Apply is verified: every patch states the lines it replaces, and Apply
// refuses a patch whose lines are not in the base text where it says, so a
// patch never applies silently to a text it was not made from. For any two
// strings old and new, Apply(old, Diff(source, old, new)) returns new byte
// for byte, whatever the line endings or encoding.
package linediff

import (
	"fmt"
	"slices"
	"strings"
)

// Lines splits text into lines, each keeping its trailing "\n"; the last line
// may lack one. Lines("") is empty. Joining the result gives back text
// exactly.
func Lines(text string) []string {
	lines := make([]string, 0, strings.Count(text, "\n")+1)
	return slices.AppendSeq(lines, strings.Lines(text))
}

// Patch replaces, in a base text, OldLines starting at line StartLine
// (1-based) with NewLines. A pure insertion has no OldLines and inserts before
// line StartLine (StartLine may be len(lines)+1, to append). Source names
// which instruction source the patch applies to.
type Patch struct {
	Source    string   `json:"source"`
	StartLine int      `json:"start_line"`
	OldLines  []string `json:"old_lines"`
	NewLines  []string `json:"new_lines"`
}

// Diff returns the patches that turn old into new, for source: a minimal edit
// script by Myers' algorithm, adjacent deletions and insertions merged into
// one patch, no context lines, in increasing StartLine order. Consecutive
// patches are separated by at least one unchanged line. Equal texts give no
// patches (an empty, non-nil slice). OldLines and NewLines are never nil
// (empty slices) so they encode as [] not null.
func Diff(source, old, new string) []Patch {
	a, b := Lines(old), Lines(new)
	// The common prefix and suffix need neither interning nor search.
	pre := commonPrefix(a, b)
	suf := commonSuffix(a[pre:], b[pre:])
	a, b = a[pre:len(a)-suf], b[pre:len(b)-suf]
	deleted, inserted := editScript(intern(a, b))
	return hunks(source, pre+1, a, b, deleted, inserted)
}

// commonPrefix returns how many lines a and b have in common at the start.
func commonPrefix(a, b []string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// commonSuffix returns how many lines a and b have in common at the end.
func commonSuffix(a, b []string) int {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

// intern numbers the distinct lines of a and b, so that lines compare as
// ints: equal lines get equal numbers, all below the returned n.
func intern(a, b []string) (ia, ib []int, n int) {
	ids := make(map[string]int, len(a))
	number := func(lines []string) []int {
		out := make([]int, len(lines))
		for i, line := range lines {
			id, ok := ids[line]
			if !ok {
				id = len(ids)
				ids[line] = id
			}
			out[i] = id
		}
		return out
	}
	ia, ib = number(a), number(b)
	return ia, ib, len(ids)
}

// hunks turns an edit script over lines a and b (deleted[i] marks a[i],
// inserted[j] marks b[j]) into patches, one per maximal run of changed lines;
// a[0] is line first of the base.
func hunks(source string, first int, a, b []string, deleted, inserted []bool) []Patch {
	patches := []Patch{}
	for i, j := 0, 0; i < len(a) || j < len(b); {
		if i < len(a) && j < len(b) && !deleted[i] && !inserted[j] {
			i, j = i+1, j+1 // a[i] and b[j] are the same kept line
			continue
		}
		i0, j0 := i, j
		for i < len(a) && deleted[i] {
			i++
		}
		for j < len(b) && inserted[j] {
			j++
		}
		patches = append(patches, Patch{
			Source:    source,
			StartLine: first + i0,
			OldLines:  clone(a[i0:i]),
			NewLines:  clone(b[j0:j]),
		})
	}
	return patches
}

// clone returns a copy of lines that is never nil and shares no memory with
// lines, so appending to one patch's lines cannot overwrite another's.
func clone(lines []string) []string {
	return append(make([]string, 0, len(lines)), lines...)
}

// Apply applies patches, in order and all against the same base numbering
// (StartLine refers to lines of base, as Diff produces them), to base and
// returns the result. It refuses (error, naming the patch index and what
// mismatched) a patch whose OldLines do not match base at StartLine, a
// StartLine out of range, or patches out of order or overlapping. A patch
// may start right where the previous one's OldLines end, which after a pure
// insertion is the insertion's own StartLine.
// Apply does not look at Source: the caller passes the patches of one source.
func Apply(base string, patches []Patch) (string, error) {
	lines := Lines(base)
	var out strings.Builder
	out.Grow(len(base))
	next := 0 // index of the first base line not yet copied or replaced
	for i, p := range patches {
		err := checkOrder(patches, i)
		if err == nil {
			err = checkBase(p, lines)
		}
		if err != nil {
			return "", fmt.Errorf("linediff: patch %d: %w", i, err)
		}
		start := p.StartLine - 1
		writeLines(&out, lines[next:start])
		writeLines(&out, p.NewLines)
		next = start + len(p.OldLines)
	}
	writeLines(&out, lines[next:])
	return out.String(), nil
}

// checkOrder returns an error if patches[i] starts before the previous patch
// or within the lines that patch replaces.
func checkOrder(patches []Patch, i int) error {
	if i == 0 {
		return nil
	}
	prev, p := patches[i-1], patches[i]
	if p.StartLine < prev.StartLine {
		return fmt.Errorf("out of order: start line %d precedes patch %d's start line %d",
			p.StartLine, i-1, prev.StartLine)
	}
	if end := prev.StartLine + len(prev.OldLines); p.StartLine < end {
		return fmt.Errorf("overlapping: start line %d falls within patch %d's old lines %d-%d",
			p.StartLine, i-1, prev.StartLine, end-1)
	}
	return nil
}

// checkBase returns an error if p's StartLine is out of range for lines or
// its OldLines differ from lines there.
func checkBase(p Patch, lines []string) error {
	if p.StartLine < 1 || p.StartLine > len(lines)+1 {
		return fmt.Errorf("start line %d out of range 1..%d", p.StartLine, len(lines)+1)
	}
	start := p.StartLine - 1
	if end := start + len(p.OldLines); end > len(lines) {
		return fmt.Errorf("old lines %d-%d run past the end of the base (%d lines)",
			p.StartLine, end, len(lines))
	}
	for j, want := range p.OldLines {
		if got := lines[start+j]; got != want {
			return fmt.Errorf("line %d mismatch: base has %q, patch expects %q",
				start+j+1, got, want)
		}
	}
	return nil
}

// writeLines writes lines to out, one after the other.
func writeLines(out *strings.Builder, lines []string) {
	for _, line := range lines {
		out.WriteString(line)
	}
}
