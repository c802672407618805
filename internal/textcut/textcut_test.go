package textcut

import "testing"

func TestPrefix(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
		cut  bool
	}{
		{"abc", 3, "abc", false}, // at the budget
		{"abcd", 3, "abc", true}, // one past
		{"aé", 2, "a", true},     // inside é (2 bytes): back to its start
		{"aé", 3, "aé", false},   // exactly
		{"日本", 4, "日", true},     // 3-byte characters
		{"日本", 2, "", true},      // nothing fits
		{"abc", -1, "", true},    // no budget
		{"", 0, "", false},
	} {
		got, cut := Prefix(c.s, c.n)
		if got != c.want || cut != c.cut {
			t.Errorf("Prefix(%q, %d) = %q, %v; want %q, %v", c.s, c.n, got, cut, c.want, c.cut)
		}
		if b, bcut := Prefix([]byte(c.s), c.n); string(b) != c.want || bcut != c.cut {
			t.Errorf("Prefix([]byte(%q), %d) = %q, %v", c.s, c.n, b, bcut)
		}
	}
	if got := Ellipsis("héllo", 2); got != "h…" {
		t.Errorf("Ellipsis: %q", got)
	}
	if got := Ellipsis("hi", 2); got != "hi" {
		t.Errorf("Ellipsis of what fits: %q", got)
	}
}
