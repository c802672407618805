package postgres

import "testing"

// TestValuesStoreBoolsAsIntegersAndNoNUL: a bool argument becomes 0 or 1, a NUL in a
// text U+FFFD, and the caller's arguments are left as they were.
func TestValuesStoreBoolsAsIntegersAndNoNUL(t *testing.T) {
	args := []any{"a", true, false, int64(7), "x\x00y"}
	got := values(args)
	if got[1] != int64(1) || got[2] != int64(0) || got[0] != "a" || got[3] != int64(7) || got[4] != "x\uFFFDy" {
		t.Errorf("values: %v", got)
	}
	if args[1] != true {
		t.Errorf("the caller's arguments changed: %v", args)
	}
}
