// Package poll is the tests' one way to wait for a condition that has no readiness
// signal to wait on — a process's end, a file's size, a connection pool's statistics:
// it looks again, every Interval, until the condition holds or a deadline passes. A test
// that can wait on a channel, a pipe or a reply waits on that instead.
package poll

import (
	"testing"
	"time"
)

// Interval is how long Until and Wait sleep between looks.
const Interval = 5 * time.Millisecond

// Until looks at cond until it holds, and fails t once timeout has passed first.
func Until(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !Wait(timeout, cond) {
		t.Fatalf("poll: the condition did not hold within %v", timeout)
	}
}

// Wait looks at cond until it holds or timeout has passed, and says whether it held.
func Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Interval)
	}
	return true
}
