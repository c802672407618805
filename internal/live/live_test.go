package live_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/live"
)

func piece(call int, kind, text string) live.Delta {
	return live.Delta{Session: "s", Turn: 1, Step: 1, Call: call, Purpose: "step", Delta: kind, Text: text}
}

func joined(ds []live.Delta) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.Text)
	}
	return b.String()
}

// TestPiecesCoalesce: a stream reads only what was published after it began; pieces of
// one call and kind are joined, up to MaxPieceBytes (at the bound, and one past it
// splits); another kind starts a piece; a piece that grew after a read gives only what
// it grew by.
func TestPiecesCoalesce(t *testing.T) {
	var h live.Hub
	h.Publish(1, piece(1, "text", "before"))
	c, changed := h.Follow(1)
	h.Publish(1, piece(1, "text", "Let "))
	h.Publish(1, piece(1, "text", "me"))
	<-changed
	got, c, _ := h.Read(1, c)
	if len(got) != 1 || got[0].Text != "Let me" || got[0].Kind != "model.delta" {
		t.Fatalf("got %+v", got)
	}
	h.Publish(1, piece(1, "text", " look."))
	h.Publish(1, piece(1, "arguments", `{"code":`))
	got, c, _ = h.Read(1, c)
	if len(got) != 2 || got[0].Text != " look." || got[1].Delta != "arguments" {
		t.Fatalf("got %+v", got)
	}
	h.Publish(1, piece(2, "text", strings.Repeat("x", live.MaxPieceBytes)))
	got, c, _ = h.Read(1, c)
	if len(got) != 1 || len(got[0].Text) != live.MaxPieceBytes {
		t.Fatalf("a piece at the bound: %d pieces", len(got))
	}
	h.Publish(1, piece(3, "text", strings.Repeat("y", live.MaxPieceBytes+1)))
	got, _, _ = h.Read(1, c)
	if len(got) != 2 || len(got[0].Text) != live.MaxPieceBytes || got[1].Text != "y" {
		t.Fatalf("a piece one past the bound: %d pieces", len(got))
	}
}

// TestBacklogIsBounded: a stream that falls behind MaxBacklogBytes is told how many
// bytes it missed; text is made valid UTF-8 and never cut inside a character.
func TestBacklogIsBounded(t *testing.T) {
	var h live.Hub
	c, _ := h.Follow(1)
	for i := range 40 {
		h.Publish(1, piece(i, "text", strings.Repeat("é", live.MaxPieceBytes/2)))
	}
	got, _, _ := h.Read(1, c)
	text := joined(got)
	if len(text) > live.MaxBacklogBytes || !utf8.ValidString(text) || got[0].Missed != int64(40*live.MaxPieceBytes)-int64(len(text)) {
		t.Errorf("read %d bytes, missed %d", len(text), got[0].Missed)
	}
	h.Publish(2, piece(1, "text", "caf\xe9"))
	got, _, _ = h.Read(2, live.Cursor{})
	if joined(got) != "caf\uFFFD" {
		t.Errorf("invalid UTF-8 read as %q", joined(got))
	}
}

// TestForgetStartsAfresh: a forgotten session wakes its streams, and what it publishes
// after is read whole.
func TestForgetStartsAfresh(t *testing.T) {
	var h live.Hub
	h.Publish(1, piece(1, "text", "old old old"))
	c, changed := h.Follow(1)
	h.Forget(1)
	<-changed
	h.Publish(1, piece(1, "text", "new"))
	if got, _, _ := h.Read(1, c); joined(got) != "new" {
		t.Errorf("after forgetting: %+v", got)
	}
}

// TestAllSessions: the pieces of every session are read in the order published, each
// naming its session, one session's not joined to another's; forgetting a session
// leaves them.
func TestAllSessions(t *testing.T) {
	var h live.Hub
	c, _ := h.Follow(live.AllSessions)
	a, b := piece(1, "text", "one "), piece(1, "text", "two")
	b.Session = "t"
	h.Publish(1, a)
	h.Publish(2, b)
	h.Publish(1, piece(1, "text", "more"))
	h.Forget(1)
	got, _, _ := h.Read(live.AllSessions, c)
	if len(got) != 3 || got[0].Session != "s" || got[0].Text != "one " || got[1].Session != "t" || got[2].Text != "more" {
		t.Fatalf("every session's pieces: %+v", got)
	}
	if own, _, _ := h.Read(2, live.Cursor{}); len(own) != 1 || own[0].Text != "two" {
		t.Errorf("a session's own pieces: %+v", own)
	}
}

// TestCursorText: a cursor read back from its text reads as it did; text that is not
// four numbers is refused.
func TestCursorText(t *testing.T) {
	var h live.Hub
	c, _ := h.Follow(1)
	h.Publish(1, piece(1, "text", "abc"))
	_, c, _ = h.Read(1, c)
	h.Publish(1, piece(1, "text", "def"))
	back, err := live.ParseCursor(c.String())
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := h.Read(1, back); joined(got) != "def" {
		t.Errorf("read from the cursor read back: %+v", got)
	}
	for _, bad := range []string{"", "1.2.3", "1.2.3.x", "1.-2.3.4", "1.2.3.4.5"} {
		if _, err := live.ParseCursor(bad); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	f.Add("1.2.3.4")
	f.Add("0.0.0.0")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := live.ParseCursor(text)
		if err != nil {
			return
		}
		var h live.Hub
		h.Publish(1, piece(1, "text", "x"))
		h.Read(1, c) // any cursor taken reads without a fault
		if again, err := live.ParseCursor(c.String()); err != nil || again != c {
			t.Errorf("%q: read back %v, %v", text, again, err)
		}
	})
}
