package store

import (
	"context"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// TestOneRequestIdentityStartsOneEffect: a second request of the same execution and
// request id finds the effect the first started, of the same kind; another request id,
// execution or kind starts its own.
func TestOneRequestIdentityStartsOneEffect(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	a, _ := s.CreateSession(ctx, "a")
	start := func(execution, request, kind string) (int64, bool) {
		t.Helper()
		req := Request{SessionID: a.ID, Generation: "g-1", ExecutionID: execution, RequestID: request, Method: kind,
			Body: jsontext.Value(`{"method":"` + kind + `"}`)}
		var id int64
		var started bool
		err := s.Update(ctx, func(tx *Tx) error {
			if err := tx.InsertRequest(&req); err != nil {
				return err
			}
			var err error
			id, started, err = tx.StartEffectOnce(a.ID, req.ID, kind, map[string]string{"text": "hi"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id, started
	}
	first, started := start("c-1", "r-1", "local.send")
	if !started {
		t.Fatal("the first request started no effect")
	}
	if id, started := start("c-1", "r-1", "local.send"); started || id != first {
		t.Errorf("the same identity again: effect %d, started %v; want effect %d, not started", id, started, first)
	}
	for _, c := range [][3]string{{"c-1", "r-2", "local.send"}, {"c-2", "r-1", "local.send"}, {"c-1", "r-1", "workspace.run"}} {
		if id, started := start(c[0], c[1], c[2]); !started || id == first {
			t.Errorf("%v: effect %d, started %v; want an effect of its own", c, id, started)
		}
	}
}
