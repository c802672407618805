package maintenance

import (
	"testing"

	"github.com/kilnrt/kiln/internal/store"
)

// FuzzParseID: an id parses exactly when it is the name of the number it parses to.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"w-1", "w-01", "w-0", "w--1", "w-9223372036854775807", "w-9223372036854775808", "w-", "x-1", "w-1 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseID(s)
		if ok && (n <= 0 || store.WorkItemID(n) != s) {
			t.Errorf("%q parsed to %d", s, n)
		}
		if !ok && n > 0 && store.WorkItemID(n) == s {
			t.Errorf("%q refused, though it names %d", s, n)
		}
	})
}
