package program

import (
	"slices"
	"strings"
	"testing"
)

// TestLogs captures print, sys.stdout and sys.stderr as log frames (flushed pieces
// joined), and raw writes to fd 1 and fd 2 through the pipes, split into lines.
func TestLogs(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, nil, testLimits, `import os, sys
print("one")
sys.stdout.write("tw")
sys.stdout.flush()
sys.stdout.write("o\nthree\n")
print("to stderr", file=sys.stderr)
os.write(1, b"raw out\nraw partial")
os.write(2, b"raw err \xff\n")
print("last", end="")
return 1`)
	wantValue(t, res, "1")
	got := slices.Clone(res.Logs)
	slices.Sort(got) // order is kept within a channel only
	want := []string{"last", "one", "raw err \ufffd", "raw out", "raw partial", "three", "to stderr", "two"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("logs %q; want %q in some order", res.Logs, want)
	}
	frames := slices.DeleteFunc(slices.Clone(res.Logs), func(s string) bool { return strings.HasPrefix(s, "raw") })
	if strings.Join(frames, "|") != "one|two|three|to stderr|last" {
		t.Errorf("log frames %q out of order", frames)
	}
}

// TestLogBudget prints past a small budget, from print and from raw writes: the logs
// stop inside the budget and end with exactly one marker.
func TestLogBudget(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxLogBytes = 100
	for _, src := range []string{
		"for i in range(100):\n    print('line', i)\nreturn 1",
		"import os\nfor i in range(100):\n    os.write(1, b'line %d\\n' % i)\nreturn 1",
		"import os\nos.write(2, b'x' * 1_000_000)\nreturn 1",
		"import sys\nsys.stdout.write('x' * 1_000_000)\nsys.stdout.flush()\nreturn 1",
	} {
		res := run(t, r, nil, lim, src)
		wantValue(t, res, "1")
		marker := TruncationMarker(100)
		if n := len(res.Logs); n == 0 || res.Logs[n-1] != marker || slices.Index(res.Logs, marker) != n-1 {
			t.Errorf("%q: logs %q; want exactly one marker, last", src, res.Logs)
			continue
		}
		cost := 1
		for _, l := range res.Logs[:len(res.Logs)-1] {
			cost += len(l) + 3
		}
		if cost > 100 {
			t.Errorf("%q: the logs cost %d bytes; want at most 100", src, cost)
		}
	}
}
