package poll_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/poll"
)

// TestWaitLooksUntilTheConditionHolds: a condition that comes true after some looks
// ends the wait with true; one that never does ends it with false once the timeout has
// passed, not before.
func TestWaitLooksUntilTheConditionHolds(t *testing.T) {
	var looks atomic.Int32
	if !poll.Wait(10*time.Second, func() bool { return looks.Add(1) == 3 }) || looks.Load() != 3 {
		t.Errorf("a condition true at the third look: %d looks", looks.Load())
	}
	start := time.Now()
	if poll.Wait(50*time.Millisecond, func() bool { return false }) {
		t.Error("a condition never true held")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %v; want the whole timeout", waited)
	}
}
