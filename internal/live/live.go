// Package live carries what the model sends while a call runs (model.delta) from a
// session's agent to the event streams that follow the session. It is not a record: a
// piece is kept only until MaxBacklogBytes of newer pieces push it out, and a stream
// sees only the pieces published after it began. The model call's record holds the
// whole reply, as before.
//
// Pieces are coalesced twice: as they are published, a piece of the same call and kind
// as the one before extends it (up to MaxPieceBytes), and a stream reads, at each wake,
// everything after its cursor, so a slow stream reads fewer, larger pieces.
package live

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/kilnrt/kiln/internal/textcut"
)

// MaxPieceBytes bounds the text of one piece as a stream reads it.
const MaxPieceBytes = 4 << 10

// MaxBacklogBytes bounds the text a session's pieces keep for streams that have not read
// them; older pieces are dropped, and a stream behind them is told how many bytes it
// missed.
const MaxBacklogBytes = 64 << 10

// Delta is one piece of a model call's reply.
type Delta struct {
	Kind    string `json:"kind"` // always "model.delta"
	Session string `json:"session"`
	Turn    int64  `json:"turn"`
	Step    int    `json:"step"`
	Call    int    `json:"call"`    // the call's seq in its turn, as its model_call record says
	Purpose string `json:"purpose"` // step, nudge, fold
	Delta   string `json:"delta"`   // text, arguments, restart (see internal/route)
	Text    string `json:"text"`
	// Missed counts the bytes of pieces this stream missed before this one: they were
	// dropped before it read them.
	Missed int64 `json:"missed,omitempty"`
}

// same says whether b extends a: the same call and kind.
func (a Delta) same(b Delta) bool {
	return a.Session == b.Session && a.Turn == b.Turn && a.Call == b.Call && a.Purpose == b.Purpose && a.Delta == b.Delta
}

// piece is a published Delta with its place in its session's sequence.
type piece struct {
	Delta
	seq   int64
	start int64 // the session's bytes published before its text
}

// backlog is one session's recent pieces.
type backlog struct {
	id      int64 // the hub's number of this backlog: a session forgotten starts another
	pieces  []piece
	seq     int64 // the last piece's seq
	bytes   int   // text kept
	total   int64 // text published
	changed chan struct{}
}

// cursor is the cursor after b's last piece.
func (b *backlog) cursor() Cursor {
	c := Cursor{backlog: b.id, seq: b.seq, pos: b.total}
	if n := len(b.pieces); n > 0 {
		c.off = len(b.pieces[n-1].Text)
	}
	return c
}

// Hub keeps each session's recent pieces. Its zero value is ready to use; it is safe for
// concurrent use.
type Hub struct {
	mu       sync.Mutex
	sessions map[int64]*backlog // by the store's id of the session
	made     int64              // backlogs made
}

func (h *Hub) backlog(session int64) *backlog {
	if h.sessions == nil {
		h.sessions = map[int64]*backlog{}
	}
	b := h.sessions[session]
	if b == nil {
		h.made++
		b = &backlog{id: h.made, changed: make(chan struct{})}
		h.sessions[session] = b
	}
	return b
}

// AllSessions names, to Follow and Read, the pieces of every session, in the order
// they were published, each naming its session. They are kept apart from each
// session's, within a MaxBacklogBytes of their own.
const AllSessions int64 = 0

// Publish adds d's text to the session's pieces, and to those of AllSessions, made
// valid UTF-8, and wakes the streams that follow either.
func (h *Hub) Publish(session int64, d Delta) {
	d.Kind, d.Missed = "model.delta", 0
	d.Text = strings.ToValidUTF8(d.Text, "\uFFFD")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.backlog(session).add(d)
	if session != AllSessions {
		h.backlog(AllSessions).add(d)
	}
}

// add adds d to b, coalescing it with the piece before when it extends it, drops the
// oldest pieces past MaxBacklogBytes, and wakes b's streams.
func (b *backlog) add(d Delta) {
	for first := true; first || d.Text != ""; first = false {
		if n := len(b.pieces); n > 0 && b.pieces[n-1].same(d) && len(b.pieces[n-1].Text) < MaxPieceBytes && d.Text != "" {
			last := &b.pieces[n-1]
			take, _ := textcut.Prefix(d.Text, MaxPieceBytes-len(last.Text))
			if take != "" {
				last.Text += take
				b.bytes += len(take)
				b.total += int64(len(take))
				d.Text = d.Text[len(take):]
				continue
			}
		}
		p := d
		p.Text, _ = textcut.Prefix(d.Text, MaxPieceBytes)
		if p.Text == "" && d.Text != "" { // a character longer than a piece cannot be; take it whole
			p.Text = d.Text
		}
		d.Text = d.Text[len(p.Text):]
		b.seq++
		b.pieces = append(b.pieces, piece{Delta: p, seq: b.seq, start: b.total})
		b.bytes += len(p.Text)
		b.total += int64(len(p.Text))
	}
	for len(b.pieces) > 1 && b.bytes > MaxBacklogBytes {
		b.bytes -= len(b.pieces[0].Text)
		b.pieces = b.pieces[1:]
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// Cursor is where a stream has read a session's pieces to.
type Cursor struct {
	backlog int64
	seq     int64 // the last piece read
	off     int   // its text read
	pos     int64 // the session's text read
}

// String is the cursor as text, for a client that reads pieces call by call (MCP's
// model_deltas); ParseCursor reads it back.
func (c Cursor) String() string {
	return fmt.Sprintf("%d.%d.%d.%d", c.backlog, c.seq, c.off, c.pos)
}

// ParseCursor reads a cursor String wrote; anything else is an error.
func ParseCursor(text string) (Cursor, error) {
	var c Cursor
	parts := strings.Split(text, ".")
	if len(parts) != 4 {
		return Cursor{}, fmt.Errorf("live: cursor %q is not four numbers", text)
	}
	var err error
	fields := []*int64{&c.backlog, &c.seq, nil, &c.pos}
	for i, part := range parts {
		var n int64
		if n, err = strconv.ParseInt(part, 10, 64); err != nil || n < 0 {
			return Cursor{}, fmt.Errorf("live: cursor %q is not four numbers", text)
		}
		if fields[i] != nil {
			*fields[i] = n
		} else if n > MaxPieceBytes*4 {
			return Cursor{}, fmt.Errorf("live: cursor %q is out of range", text)
		} else {
			c.off = int(n)
		}
	}
	return c, nil
}

// Follow starts a stream of session's pieces: its cursor is at the newest piece, and the
// channel is closed when a piece is published after it.
func (h *Hub) Follow(session int64) (Cursor, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.backlog(session)
	return b.cursor(), b.changed
}

// Read returns the session's pieces after c, and the cursor after them, with a channel
// closed at the next publish.
func (h *Hub) Read(session int64, c Cursor) ([]Delta, Cursor, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.backlog(session)
	if c.backlog != b.id { // the session was forgotten since: its pieces are all new
		c = Cursor{backlog: b.id}
	}
	var out []Delta
	for _, p := range b.pieces {
		switch {
		case p.seq < c.seq:
			continue
		case p.seq == c.seq:
			if len(p.Text) > c.off {
				d := p.Delta
				d.Text = p.Text[c.off:]
				out = append(out, d)
			}
		default:
			out = append(out, p.Delta)
		}
	}
	if len(b.pieces) > 0 && b.pieces[0].seq > c.seq && b.pieces[0].start > c.pos && len(out) > 0 {
		out[0].Missed = b.pieces[0].start - c.pos // the pieces between were dropped unread
	}
	next := b.cursor()
	return out, next, b.changed
}

// Forget drops the session's pieces: its agent has stopped. A stream that follows it
// again starts afresh. The pieces of AllSessions stay until newer ones push them out.
func (h *Hub) Forget(session int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.sessions[session]; b != nil && session != AllSessions {
		close(b.changed)
		delete(h.sessions, session)
	}
}
