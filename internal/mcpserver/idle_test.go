package mcpserver

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/poll"
)

// closed records the sessions an idle closes.
type closed struct {
	mu  sync.Mutex
	ids []string
}

func (c *closed) close(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, id)
}

func (c *closed) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ids)
}

// TestIdleReclaimsTheOldestIdleSession: a session with a request in flight (a stream
// open) is never reclaimed; of the idle ones, the one idle longest is; with none idle,
// none is.
func TestIdleReclaimsTheOldestIdleSession(t *testing.T) {
	var c closed
	i := &idle{timeout: time.Hour, exists: func(string) bool { return true }, close: c.close}
	defer i.stop()
	for _, id := range []string{"a", "b", "c"} {
		i.end(id, true)
	}
	i.begin("a") // a stream of a stays open
	if !i.reclaim() || !slices.Equal(c.list(), []string{"b"}) {
		t.Fatalf("reclaimed %v; want b, idle longest of those idle", c.list())
	}
	if !i.reclaim() || !slices.Equal(c.list(), []string{"b", "c"}) {
		t.Fatalf("reclaimed %v; want b, c", c.list())
	}
	if i.reclaim() {
		t.Fatalf("reclaimed %v with every session in use", c.list())
	}
	i.end("a", false)
	if !i.reclaim() || !slices.Equal(c.list(), []string{"b", "c", "a"}) {
		t.Fatalf("reclaimed %v; want a once its stream closed", c.list())
	}
}

// TestIdleClosesASessionIdleForItsTimeout: a session idle for the timeout is closed; one
// with a request in flight through the timeout is not, until it has been idle for it.
func TestIdleClosesASessionIdleForItsTimeout(t *testing.T) {
	var c closed
	const timeout = 50 * time.Millisecond
	i := &idle{timeout: timeout, exists: func(id string) bool { return id != "gone" }, close: c.close}
	defer i.stop()
	i.end("idle", true)
	i.end("busy", true)
	i.begin("busy")
	if i.begin("gone") {
		t.Fatal("a request of a session the server does not hold was tracked")
	}
	start := time.Now()
	poll.Until(t, 10*time.Second, func() bool { return len(c.list()) == 1 })
	if got := c.list(); got[0] != "idle" || time.Since(start) < timeout {
		t.Fatalf("closed %v after %v; want idle, after %v", got, time.Since(start), timeout)
	}
	i.mu.Lock()
	armed := i.by["busy"].timer != nil
	i.mu.Unlock()
	if armed || len(c.list()) != 1 {
		t.Fatalf("with a request in flight: a timer armed %v, closed %v", armed, c.list())
	}
	ended := time.Now()
	i.end("busy", false)
	poll.Until(t, 10*time.Second, func() bool { return len(c.list()) == 2 })
	if time.Since(ended) < timeout {
		t.Fatalf("busy closed %v after its request ended; want %v", time.Since(ended), timeout)
	}
}
