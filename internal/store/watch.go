package store

import (
	"slices"
	"sync"
)

// watchers hands out the channels that tell a reader the record has changed. A commit
// closes the channel of each session it journaled, and the channel of every session's
// readers: a reader of one session is not woken by another's commit, and a commit costs
// one close per session it touched, however many readers wait (as tailscale's event bus
// wakes the subscribers of a type only).
type watchers struct {
	mu      sync.Mutex
	session map[int64]chan struct{} // by session id; a channel made at the first Watch
	any     chan struct{}           // every session's readers; nil until the first Watch
}

// Watch returns a channel closed at the next commit that journals a record of session,
// or of any session for 0. Ask for it before reading what is there: a commit after the
// read then closes it.
func (s *Store) Watch(session int64) <-chan struct{} {
	w := &s.watchers
	w.mu.Lock()
	defer w.mu.Unlock()
	if session == 0 {
		if w.any == nil {
			w.any = make(chan struct{})
		}
		return w.any
	}
	if w.session == nil {
		w.session = map[int64]chan struct{}{}
	}
	ch := w.session[session]
	if ch == nil {
		ch = make(chan struct{})
		w.session[session] = ch
	}
	return ch
}

// committed wakes the readers of sessions, and every session's readers if any.
func (w *watchers) committed(sessions []int64) {
	if len(sessions) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range sessions {
		if ch := w.session[id]; ch != nil {
			close(ch)
			delete(w.session, id)
		}
	}
	if w.any != nil {
		close(w.any)
		w.any = nil
	}
}

// changed wakes the readers of sessions, and every reader for nil: the commits another
// process told of.
func (w *watchers) changed(sessions []int64) {
	if sessions != nil {
		w.committed(sessions)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, ch := range w.session {
		close(ch)
		delete(w.session, id)
	}
	if w.any != nil {
		close(w.any)
		w.any = nil
	}
}

// touch notes that the transaction journals a record of session, for the readers its
// commit wakes.
func (tx *Tx) touch(session int64) {
	if !slices.Contains(tx.sessions, session) {
		tx.sessions = append(tx.sessions, session)
	}
}
