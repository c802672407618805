// Package textcut cuts text to a byte budget without splitting a UTF-8 character.
package textcut

import "unicode/utf8"

// Prefix is the longest prefix of s of at most n bytes that ends on a character
// boundary, and whether anything was cut.
func Prefix[T ~string | ~[]byte](s T, n int) (T, bool) {
	if len(s) <= n {
		return s, false
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// Ellipsis is s cut to at most n bytes, with "…" after it when anything was cut.
func Ellipsis(s string, n int) string {
	head, cut := Prefix(s, n)
	if cut {
		return head + "…"
	}
	return head
}
