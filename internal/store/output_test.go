package store

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestOutputChunksAreJournaledInOrderWithinTheBound(t *testing.T) {
	s, sess := openEphemeral(t)
	ctx := context.Background()
	e, err := s.StartExecution(ctx, sess.ID, "g-1", "print('hi')")
	if err != nil {
		t.Fatal(err)
	}
	half := strings.Repeat("x", MaxOutputBytes/2)
	for i, stream := range []string{"stdout", "stderr"} {
		c, err := s.AppendOutput(ctx, sess.ID, e.CellID, stream, half)
		if err != nil || c.Index != i || c.CellID != e.CellID {
			t.Fatalf("chunk %d: %+v, %v", i, c, err)
		}
	}
	// At the bound: one byte more is refused, and nothing of it is kept.
	if _, err := s.AppendOutput(ctx, sess.ID, e.CellID, "stdout", "y"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("one byte past %d: %v; want ErrInvalid", MaxOutputBytes, err)
	}
	for _, bad := range []struct{ stream, text string }{{"result", "1"}, {"stdout", ""}} {
		if _, err := s.AppendOutput(ctx, sess.ID, e.CellID, bad.stream, bad.text); !errors.Is(err, ErrInvalid) {
			t.Errorf("chunk %+v: %v; want ErrInvalid", bad, err)
		}
	}
	entries, err := s.Log(ctx, LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	var got []OutputChunk
	for _, en := range entries {
		if en.Kind == KindOutput {
			got = append(got, en.Record.(OutputChunk))
		}
	}
	if len(got) != 2 || got[0].Stream != "stdout" || got[1].Stream != "stderr" || got[1].Index != 1 || got[1].Text != half {
		t.Fatalf("journaled chunks %+v", got)
	}
	if err := s.EndExecution(ctx, e, ExecutionEnd{Status: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendOutput(ctx, sess.ID, e.CellID, "stdout", "late"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("output of an ended cell: %v; want ErrNotFound", err)
	}
}

// TestALogCallStopsAtItsBytes journals four chunks of a quarter of the output bound:
// a call bounded at two of them returns the entries up to the second, and the next
// call the other two.
func TestALogCallStopsAtItsBytes(t *testing.T) {
	s, sess := openEphemeral(t)
	ctx := context.Background()
	e, err := s.StartExecution(ctx, sess.ID, "g-1", "print('hi')")
	if err != nil {
		t.Fatal(err)
	}
	quarter := strings.Repeat("x", MaxOutputBytes/4)
	for range 4 {
		if _, err := s.AppendOutput(ctx, sess.ID, e.CellID, "stdout", quarter); err != nil {
			t.Fatal(err)
		}
	}
	chunks := func(since int64) []Entry {
		t.Helper()
		entries, err := s.Log(ctx, LogFilter{Session: sess.ID, Since: since, Bytes: 2 * len(quarter)})
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	first := chunks(0)
	if n := len(first); n < 2 || first[n-1].Kind != KindOutput || first[n-2].Kind != KindOutput {
		t.Fatalf("first call: %d entries; want them to end at the second chunk", n)
	}
	rest := chunks(first[len(first)-1].Seq)
	if len(rest) != 2 || rest[0].Kind != KindOutput || rest[1].Kind != KindOutput {
		t.Fatalf("second call: %d entries; want the last two chunks", len(rest))
	}
	if len(chunks(rest[1].Seq)) != 0 {
		t.Errorf("a third call found entries; want none")
	}
}
