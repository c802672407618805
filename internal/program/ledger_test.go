package program

import (
	"strings"
	"testing"
)

// entryCost is what one log entry of plain ASCII costs: its quotes and the + 1.
func entryCost(s string) int { return len(s) + 3 }

// TestLedgerBudget fills a budget exactly, and one byte past it: the budget is
// maxLogBytes − 1, and 16 entries "abc" cost 96 of its 99 bytes.
func TestLedgerBudget(t *testing.T) {
	const max = 100
	for _, tt := range []struct {
		last      string
		truncated bool
	}{
		{"", false}, // 96 + 3 = 99: at the budget
		{"x", true}, // 96 + 4 = 100: one past it
	} {
		l := newLedger(max)
		for range 16 {
			l.frame(Log{Text: "abc"})
		}
		l.frame(Log{Text: tt.last})
		logs := l.close()
		want := tt.last
		if tt.truncated {
			want = TruncationMarker(max)
		}
		if len(logs) != 17 || logs[16] != want {
			t.Errorf("last entry %q: logs end %q (%d entries); want %q", tt.last, logs[len(logs)-1], len(logs), want)
		}
	}
	if 16*entryCost("abc")+entryCost("") != max-1 {
		t.Fatal("the test's arithmetic is off")
	}
}

func TestLedger(t *testing.T) {
	marker := TruncationMarker(64)
	tests := []struct {
		name string
		do   func(l *ledger, out, errs *pipe)
		want []string
	}{
		{"lines", func(l *ledger, _, _ *pipe) {
			l.frame(Log{Text: "a"})
			l.frame(Log{Text: "b"})
		}, []string{"a", "b"}},
		{"open pieces join", func(l *ledger, _, _ *pipe) {
			l.frame(Log{Text: "he", Open: true})
			l.frame(Log{Text: "ll", Open: true})
			l.frame(Log{Text: "o"})
			l.frame(Log{Text: "", Open: true})
		}, []string{"hello", ""}},
		{"a pending open piece is the last line", func(l *ledger, _, _ *pipe) {
			l.frame(Log{Text: "x", Open: true})
		}, []string{"x"}},
		{"the child's notice ends the capture", func(l *ledger, _, _ *pipe) {
			l.frame(Log{Text: "a"})
			l.frame(Log{Text: "ignored", Truncated: true})
			l.frame(Log{Text: "b"})
			l.frame(Log{Text: "", Truncated: true})
		}, []string{"a", marker}},
		{"raw lines split", func(l *ledger, out, errs *pipe) {
			out.Write([]byte("r1\nr"))
			out.Write([]byte("2\n\nr3"))
			errs.Write([]byte("e\xff\n"))
		}, []string{"r1", "r2", "", "e\ufffd", "r3"}},
		{"raw output past the budget", func(l *ledger, out, _ *pipe) {
			out.Write([]byte(strings.Repeat("x", 1000)))
			out.Write([]byte("\nmore\n"))
		}, []string{marker}},
		{"either path runs it out", func(l *ledger, out, _ *pipe) {
			out.Write([]byte(strings.Repeat("y", 50) + "\n"))
			l.frame(Log{Text: strings.Repeat("z", 20)})
			l.frame(Log{Text: "after"})
		}, []string{strings.Repeat("y", 50), marker}},
		{"lone surrogates and escapes", func(l *ledger, _, _ *pipe) {
			l.frame(Log{Text: "a\xed\xa0\x80b"})
		}, []string{"a\ufffdb"}},
	}
	for _, tt := range tests {
		l := newLedger(64)
		out, errs := l.pipe(), l.pipe()
		tt.do(l, out, errs)
		out.flush()
		errs.flush()
		got := l.close()
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: got %q; want %q", tt.name, got, tt.want)
		}
		// After close nothing more is taken, and the marker stays the last entry.
		l.frame(Log{Text: "late"})
		out.Write([]byte("late\n"))
		if again := l.close(); len(again) != len(got) {
			t.Errorf("%s: logs changed after close: %q", tt.name, again)
		}
	}
}

// TestLedgerEscapedCost bills an entry by its escaped size: a newline or quote costs
// two bytes, a control character six, a lone surrogate (made U+FFFD) three.
func TestLedgerEscapedCost(t *testing.T) {
	for _, tt := range []struct {
		text string
		cost int
	}{
		{"a", 4},
		{"\"", 5},
		{"\x01", 9},
		{"é", 5},
		{"\xed\xa0\x80", 6},
	} {
		l := newLedger(1 + tt.cost)
		l.frame(Log{Text: tt.text})
		if logs := l.close(); len(logs) != 1 {
			t.Errorf("%q at a budget of its cost: %q", tt.text, logs)
		}
		l = newLedger(tt.cost)
		l.frame(Log{Text: tt.text})
		if logs := l.close(); len(logs) != 1 || logs[0] != TruncationMarker(tt.cost) {
			t.Errorf("%q one byte short: %q", tt.text, logs)
		}
	}
}
