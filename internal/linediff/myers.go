package linediff

// editScript computes a minimal edit script turning a into b, sequences of
// line numbers below n: deleted[i] marks a[i] as deleted and inserted[j]
// marks b[j] as inserted; the unmarked lines of a and b are a longest common
// subsequence, paired in order. A line that occurs in only one of a and b
// can only be deleted or inserted, so the search runs on the other lines
// alone, and a text rewritten from scratch costs little more than an edited
// one.
func editScript(a, b []int, n int) (deleted, inserted []bool) {
	posA, sharedA := occurring(a, b, n)
	posB, sharedB := occurring(b, a, n)
	s := newScript(sharedA, sharedB)
	s.compare(0, len(sharedA), 0, len(sharedB))
	return spread(s.deleted, posA, len(a)), spread(s.inserted, posB, len(b))
}

// occurring returns the positions in x of the lines that also occur in y,
// and those lines; x and y hold line numbers below n.
func occurring(x, y []int, n int) (pos, lines []int) {
	inY := make([]bool, n)
	for _, line := range y {
		inY[line] = true
	}
	pos, lines = make([]int, 0, len(x)), make([]int, 0, len(x))
	for i, line := range x {
		if inY[line] {
			pos = append(pos, i)
			lines = append(lines, line)
		}
	}
	return pos, lines
}

// spread returns n flags: flags[pos[t]] is sub[t], and the others, at lines
// left out of the search, are set.
func spread(sub []bool, pos []int, n int) []bool {
	flags := make([]bool, n)
	mark(flags)
	for t, i := range pos {
		flags[i] = sub[t]
	}
	return flags
}

// newScript returns the state for finding an edit script from a to b.
func newScript(a, b []int) *script {
	return &script{
		a:        a,
		b:        b,
		ra:       reversed(a),
		rb:       reversed(b),
		deleted:  make([]bool, len(a)),
		inserted: make([]bool, len(b)),
		fwd:      make([]int, len(a)+len(b)+3),
		rev:      make([]int, len(a)+len(b)+3),
	}
}

// reversed returns a reversed copy of x.
func reversed(x []int) []int {
	r := make([]int, len(x))
	for i, v := range x {
		r[len(x)-1-i] = v
	}
	return r
}

// script is the state of Myers' linear-space divide and conquer.
type script struct {
	a, b              []int  // the sequences compared
	ra, rb            []int  // a and b reversed, for the backward search
	deleted, inserted []bool // the edit script found so far
	fwd, rev          []int  // storage for the forward and backward frontiers
}

// compare finds a minimal edit script for a[aLo:aHi] and b[bLo:bHi]. After
// trimming their common prefix and suffix, if both remain non-empty they
// differ by at least two edits, so the middle point splits them into two
// smaller problems.
func (s *script) compare(aLo, aHi, bLo, bHi int) {
	for aLo < aHi && bLo < bHi && s.a[aLo] == s.b[bLo] {
		aLo, bLo = aLo+1, bLo+1
	}
	for aLo < aHi && bLo < bHi && s.a[aHi-1] == s.b[bHi-1] {
		aHi, bHi = aHi-1, bHi-1
	}
	switch {
	case aLo == aHi:
		mark(s.inserted[bLo:bHi])
	case bLo == bHi:
		mark(s.deleted[aLo:aHi])
	default:
		x, y := s.middle(aLo, aHi, bLo, bHi)
		s.compare(aLo, x, bLo, y)
		s.compare(x, aHi, y, bHi)
	}
}

// mark sets every element of flags.
func mark(flags []bool) {
	for i := range flags {
		flags[i] = true
	}
}

// middle returns a point (x, y), aLo <= x <= aHi and bLo <= y <= bHi, through
// which a shortest edit path from (aLo, bLo) to (aHi, bHi) passes, with
// ceil(D/2) of its D edits before the point and floor(D/2) after. It searches
// forward from (aLo, bLo) and backward from (aHi, bHi), one edit more each
// round, until the two frontiers meet on a diagonal (Myers' middle snake).
func (s *script) middle(aLo, aHi, bLo, bHi int) (x, y int) {
	n, m := aHi-aLo, bHi-bLo
	a, b := s.a[aLo:aHi], s.b[bLo:bHi]
	ra := s.ra[len(s.a)-aHi : len(s.a)-aLo]
	rb := s.rb[len(s.b)-bHi : len(s.b)-bLo]
	fwd, rev := newFrontier(s.fwd, n, m), newFrontier(s.rev, n, m)
	// A path from (0, 0) on diagonal k = x-y is, seen from (n, m) backward,
	// on diagonal delta-k. D has the parity of delta, so the frontiers can
	// first meet after a forward round if delta is odd and after a backward
	// round if it is even.
	delta := n - m
	for d := 0; ; d++ {
		fwd.extend(a, b, d)
		if delta&1 == 1 {
			if k, ok := fwd.meets(rev, d, delta); ok {
				return aLo + fwd.x(k), bLo + fwd.x(k) - k
			}
		}
		rev.extend(ra, rb, d)
		if delta&1 == 0 {
			if k, ok := fwd.meets(rev, d, delta); ok {
				return aLo + fwd.x(k), bLo + fwd.x(k) - k
			}
		}
	}
}

// unreached marks a diagonal no path has reached yet. It is below -1 so that
// a step right from it, unreached+1, still loses to any real x.
const unreached = -2

// frontier is Myers' V array for an n×m edit graph searched from (0, 0): for
// each diagonal k = x-y, the furthest x reached so far by a path with at most
// as many edits as the last round of k's parity.
type frontier struct {
	v    []int // v[k+m+1] for k in -m-1..n+1; the outer two stay unreached
	n, m int
}

// newFrontier returns an empty frontier for an n×m graph, stored in buf.
func newFrontier(buf []int, n, m int) frontier {
	v := buf[:n+m+3]
	for i := range v {
		v[i] = unreached
	}
	return frontier{v: v, n: n, m: m}
}

// x returns the furthest x reached on diagonal k.
func (f *frontier) x(k int) int { return f.v[k+f.m+1] }

// diagonals returns the first and last diagonal that round d reaches: those
// from -d to d, of the parity of d, that cross the graph.
func (f *frontier) diagonals(d int) (lo, hi int) {
	lo, hi = -d, d
	if lo < -f.m {
		lo = -f.m + (d+f.m)&1
	}
	if hi > f.n {
		hi = f.n - (d+f.n)&1
	}
	return lo, hi
}

// extend runs round d: on each diagonal it reaches, it takes the furthest
// point one edit from round d-1 (a step down from diagonal k+1 or right
// from k-1, kept inside the graph), then follows equal lines diagonally as
// far as they go.
func (f *frontier) extend(a, b []int, d int) {
	lo, hi := f.diagonals(d)
	for k := lo; k <= hi; k += 2 {
		x := 0
		if d > 0 {
			x = min(max(f.x(k+1), f.x(k-1)+1), f.n, f.m+k)
		}
		y := x - k
		for x < f.n && y < f.m && a[x] == b[y] {
			x, y = x+1, y+1
		}
		f.v[k+f.m+1] = x
	}
}

// meets returns a diagonal on which f, after round d, has reached or passed
// the point that the backward frontier r has reached; delta is n-m.
func (f *frontier) meets(r frontier, d, delta int) (k int, ok bool) {
	lo, hi := f.diagonals(d)
	for k := lo; k <= hi; k += 2 {
		if f.x(k) >= f.n-r.x(delta-k) {
			return k, true
		}
	}
	return 0, false
}
