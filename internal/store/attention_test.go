package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestAnEventIsDecidedOnce: the first decision recorded stays, with the policy that made
// it; a second, as another process deciding the same input would make, is told the first
// and changes nothing.
func TestAnEventIsDecidedOnce(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	a, _ := s.CreateSession(ctx, "a")
	b, _ := s.CreateSession(ctx, "b")
	ev, err := s.AppendEvent(ctx, a.ID, SourceOperator, map[string]string{"text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.SetAttention(ctx, a.ID, ev.ID, Behavior{Epoch: 2, ReleaseID: "r2"}, map[string]any{"action": "wake", "priority": 100})
	if err != nil || string(first.Attention) != `{"action":"wake","priority":100}` || first.AttentionBy == nil ||
		*first.AttentionBy != (Behavior{Epoch: 2, ReleaseID: "r2"}) {
		t.Fatalf("the first decision: %+v %v", first, err)
	}
	again, err := s.SetAttention(ctx, a.ID, ev.ID, Behavior{Epoch: 3, ReleaseID: "r3"}, map[string]any{"action": "defer", "seconds": 60})
	if err != nil || string(again.Attention) != string(first.Attention) || *again.AttentionBy != *first.AttentionBy {
		t.Errorf("a second decision: %+v %v; want the first, %+v", again, err, first)
	}
	if got, _ := s.EventByID(ctx, a.ID, ev.ID); string(got.Attention) != string(first.Attention) || *got.AttentionBy != *first.AttentionBy {
		t.Errorf("the event holds %+v; want %+v", got, first)
	}
	if _, err := s.SetAttention(ctx, b.ID, ev.ID, Behavior{}, map[string]any{"action": "wake"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("another session's event: %v; want ErrNotFound", err)
	}
}

// TestDecisionsFromBeforeSchema15NameNoPolicy: an input an older kiln decided keeps its
// decision through the migration, with no policy named; one it left undecided is decided
// with its maker.
func TestDecisionsFromBeforeSchema15NameNoPolicy(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	old := openAt(t, path, 14)
	for _, q := range []string{
		`INSERT INTO sessions (id, name, created_at_ms) VALUES (1, 's', 0)`,
		`INSERT INTO events (id, session_id, source, received_at_ms, payload, attention) VALUES (1, 1, 'operator', 0, '{}', '{"action":"wake","priority":100}')`,
		`INSERT INTO events (id, session_id, source, received_at_ms, payload) VALUES (2, 1, 'operator', 0, '{}')`,
	} {
		if _, err := old.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev, err := s.EventByID(ctx, 1, 1); err != nil || string(ev.Attention) != `{"action":"wake","priority":100}` || ev.AttentionBy != nil {
		t.Errorf("a decision from before: %+v, %v; want it kept, no policy named", ev, err)
	}
	if ev, err := s.SetAttention(ctx, 1, 2, Behavior{Epoch: 1, ReleaseID: "r1"}, map[string]string{"action": "wake"}); err != nil ||
		ev.AttentionBy == nil || ev.AttentionBy.ReleaseID != "r1" {
		t.Errorf("an input left undecided: %+v, %v", ev, err)
	}
}
