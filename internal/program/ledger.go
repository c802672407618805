package program

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/lossless"
)

// TruncationMarker returns the log entry that ends a run's logs once a ledger ran out
// of its maxLogBytes: "[kiln] log capture truncated at <maxLogBytes> bytes".
func TruncationMarker(maxLogBytes int) string {
	return markerPrefix + strconv.Itoa(maxLogBytes) + " bytes"
}

const markerPrefix = "[kiln] log capture truncated at "

// A ledger keeps a run's logs under its byte budget, as docs/programs.md describes:
// entries from log frames (open pieces joined to what follows) and lines written
// straight to fd 1 and fd 2, each costing its escaped JSON string size + 1 against a
// budget of maxLogBytes − 1, the rule the child's own ledger follows. The first entry
// that does not fit, or the child's truncation notice, ends the capture: nothing more
// is kept, and the logs end with exactly one marker. It is safe for concurrent use.
type ledger struct {
	mu        sync.Mutex
	max       int
	left      int
	entries   []string
	truncated bool
	closed    bool
	open      []byte // the pieces of a log-frame line so far
	isOpen    bool   // an open piece came and its line has not ended
}

func newLedger(maxLogBytes int) *ledger {
	return &ledger{max: maxLogBytes, left: maxLogBytes - 1, entries: []string{}}
}

// frame records a log frame.
func (l *ledger) frame(f Log) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.truncated {
		return
	}
	if f.Truncated {
		l.truncate()
		return
	}
	l.open = append(l.open, f.Text...)
	if f.Open {
		l.isOpen = true
		// Quotes and the + 1 aside, a line costs at least a byte a byte.
		if len(l.open)+3 > l.left {
			l.truncate()
		}
		return
	}
	l.isOpen = false
	text := string(l.open)
	l.open = l.open[:0]
	l.add(text)
}

// add bills entry, WTF-8 from a frame or raw bytes from a pipe, and keeps it as text,
// each lone surrogate or byte that begins no character made U+FFFD; l.mu held.
func (l *ledger) add(entry string) {
	text := sanitize(entry)
	cost := lossless.Size(lossless.String(text)) + 1
	if cost > l.left {
		l.truncate()
		return
	}
	l.left -= cost
	l.entries = append(l.entries, text)
}

func (l *ledger) truncate() {
	l.truncated = true
	l.open = nil
}

// close ends the capture and returns the logs: a pending open piece is the last line
// of its stream, and the marker comes last if either ledger ran out.
func (l *ledger) close() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		if !l.truncated && (l.isOpen || len(l.open) > 0) {
			l.add(string(l.open))
		}
		if l.truncated {
			l.entries = append(l.entries, TruncationMarker(l.max))
		}
	}
	return l.entries
}

// A pipe is the ledger's sink for one of the child's fd 1 and fd 2: it splits what
// arrives into lines and bills each as an entry. It holds at most one partial line,
// no longer than what is left of the budget.
type pipe struct {
	l       *ledger
	partial []byte
}

func (l *ledger) pipe() *pipe { return &pipe{l: l} }

// Write takes raw output; it never fails, so the child's output is always drained.
func (p *pipe) Write(b []byte) (int, error) {
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(b)
	for len(b) > 0 && !l.closed && !l.truncated {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.partial = append(p.partial, b...)
			if len(p.partial)+3 > l.left {
				l.truncate()
			}
			break
		}
		line := b[:i]
		if len(p.partial) > 0 {
			line = append(p.partial, line...)
			p.partial = p.partial[:0]
		}
		l.add(string(line))
		b = b[i+1:]
	}
	if l.truncated {
		p.partial = nil
	}
	return n, nil
}

// flush bills a pending partial line, the last of its stream.
func (p *pipe) flush() {
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(p.partial) > 0 && !l.closed && !l.truncated {
		l.add(string(p.partial))
	}
	p.partial = nil
}

// sanitize returns s as valid UTF-8: a WTF-8 lone surrogate (three bytes) becomes one
// U+FFFD, as does each other byte that begins no character.
func sanitize(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || w > 1 {
			b.WriteString(s[i : i+w])
			i += w
			continue
		}
		b.WriteRune(utf8.RuneError)
		if i+2 < len(s) && s[i] == 0xed && s[i+1] >= 0xa0 && s[i+1] <= 0xbf && s[i+2] >= 0x80 && s[i+2] <= 0xbf {
			i += 3
		} else {
			i++
		}
	}
	return b.String()
}
