package mcpserver

import (
	"sync"
	"time"
)

// idle tracks the use of the HTTP MCP sessions: a session is in use while a request of
// it is served (a POST, or a GET's open stream); one idle for the timeout is closed.
// Clients that leave without a DELETE, as many do, so hold no place for long.
type idle struct {
	timeout time.Duration
	exists  func(session string) bool // whether the server holds session
	close   func(session string)      // closes a session; called without mu held

	mu sync.Mutex
	by map[string]*use
}

// use is one session's requests in flight, and when the last ended.
type use struct {
	n     int
	last  time.Time
	timer *time.Timer
}

// begin notes a request of session, if the server holds it, and says whether it did.
func (i *idle) begin(session string) bool {
	if !i.exists(session) {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	u := i.by[session]
	if u == nil {
		if i.by == nil {
			i.by = map[string]*use{}
		}
		u = &use{}
		i.by[session] = u
	}
	if u.timer != nil {
		u.timer.Stop()
		u.timer = nil
	}
	u.n++
	return true
}

// end notes the end of a request of session; with none left, the session's idle time
// starts. The request that opened the session (opened) ends without having begun.
func (i *idle) end(session string, opened bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	u := i.by[session]
	switch {
	case u == nil && !opened:
		return // forgotten: the session was deleted or reclaimed meanwhile
	case u == nil:
		if i.by == nil {
			i.by = map[string]*use{}
		}
		u = &use{}
		i.by[session] = u
	case !opened:
		u.n--
	}
	if u.n > 0 {
		return
	}
	u.last = time.Now()
	if u.timer != nil {
		u.timer.Stop()
	}
	u.timer = time.AfterFunc(i.timeout, func() { i.expire(session, u) })
}

// expire closes session if it is still idle as u left it.
func (i *idle) expire(session string, u *use) {
	i.mu.Lock()
	if i.by[session] != u || u.n > 0 || time.Since(u.last) < i.timeout {
		i.mu.Unlock()
		return
	}
	delete(i.by, session)
	i.mu.Unlock()
	i.close(session)
}

// forget drops session, which was closed.
func (i *idle) forget(session string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if u := i.by[session]; u != nil {
		if u.timer != nil {
			u.timer.Stop()
		}
		delete(i.by, session)
	}
}

// reclaim closes the session idle longest, if any is idle, and says whether one was.
func (i *idle) reclaim() bool {
	i.mu.Lock()
	var oldest string
	var at time.Time
	for id, u := range i.by {
		if u.n == 0 && (oldest == "" || u.last.Before(at)) {
			oldest, at = id, u.last
		}
	}
	if oldest != "" {
		if t := i.by[oldest].timer; t != nil {
			t.Stop()
		}
		delete(i.by, oldest)
	}
	i.mu.Unlock()
	if oldest == "" {
		return false
	}
	i.close(oldest)
	return true
}

// stop stops every timer.
func (i *idle) stop() {
	i.mu.Lock()
	defer i.mu.Unlock()
	for id, u := range i.by {
		if u.timer != nil {
			u.timer.Stop()
		}
		delete(i.by, id)
	}
}
