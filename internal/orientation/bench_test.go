package orientation_test

import (
	"context"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/orientation"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/store"
)

// BenchmarkSources measures what reading a session's adopted sources adds to each
// observation of its instruction text (one at every cell's end), in a data directory
// with one global adoption and one of the session's own: p50, p99 and CPU per read.
func BenchmarkSources(b *testing.B) {
	ctx := context.Background()
	st, err := store.OpenDir(ctx, b.TempDir(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sess, err := st.CreateSession(ctx, "a")
	if err != nil {
		b.Fatal(err)
	}
	for i, scope := range []store.Scope{store.GlobalScope, store.SessionScope(sess)} {
		if err := st.Update(ctx, func(tx *store.Tx) error {
			req := store.Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r", Method: "m", Body: []byte(`{}`)}
			if err := tx.InsertRequest(&req); err != nil {
				return err
			}
			by := store.Actor{SessionID: sess.ID, ExecutionID: "c-1", RequestID: req.ID}
			id := []string{"g", "s"}[i]
			c := store.Candidate{CandidateID: id, Target: "orientation", Scope: scope, Text: "be brief\n", Digest: "d", StagedBy: by}
			if _, err := tx.StageCandidate(&c, orientation.MaxCandidates); err != nil {
				return err
			}
			_, _, err := tx.AdoptCandidate(id, "op-"+id, by)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	m := perfstat.Start()
	b.ResetTimer()
	for b.Loop() {
		began := time.Now()
		src, err := orientation.Sources(ctx, st, sess.ID)
		m.Add(time.Since(began))
		if err != nil || len(src) != 1 || src[0].Text != "be brief\n" {
			b.Fatalf("%+v %v", src, err)
		}
	}
	m.Report(b, b.N)
}
