package program

import "sync"

// A byteBudget bounds the bytes that things in progress hold: acquire waits until
// there is room, and one thing alone is always let in, however large.
type byteBudget struct {
	max   int
	freed chan struct{} // holds a token once bytes were released

	mu   sync.Mutex
	used int
}

func newByteBudget(max int) *byteBudget {
	return &byteBudget{max: max, freed: make(chan struct{}, 1)}
}

// acquire takes n bytes, waiting until they fit or nothing else holds any; it returns
// false if stop closed first.
func (b *byteBudget) acquire(n int, stop <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		select {
		case <-b.freed:
		case <-stop:
			return false
		}
	}
}

// release gives back n bytes that acquire took.
func (b *byteBudget) release(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}
