package store

import (
	"context"
	"errors"
	"testing"
)

// TestAnEventIsDecidedOnce: the first decision recorded stays; a second, as another
// process deciding the same input would make, is told the first and changes nothing.
func TestAnEventIsDecidedOnce(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	a, _ := s.CreateSession(ctx, "a")
	b, _ := s.CreateSession(ctx, "b")
	ev, err := s.AppendEvent(ctx, a.ID, SourceOperator, map[string]string{"text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.SetAttention(ctx, a.ID, ev.ID, map[string]any{"action": "wake", "priority": 100})
	if err != nil || string(first.Attention) != `{"action":"wake","priority":100}` {
		t.Fatalf("the first decision: %+v %v", first, err)
	}
	again, err := s.SetAttention(ctx, a.ID, ev.ID, map[string]any{"action": "defer", "seconds": 60})
	if err != nil || string(again.Attention) != string(first.Attention) {
		t.Errorf("a second decision: %+v %v; want the first, %+v", again, err, first)
	}
	if got, _ := s.EventByID(ctx, a.ID, ev.ID); string(got.Attention) != string(first.Attention) {
		t.Errorf("the event holds %+v; want %+v", got, first)
	}
	if _, err := s.SetAttention(ctx, b.ID, ev.ID, map[string]any{"action": "wake"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("another session's event: %v; want ErrNotFound", err)
	}
}
