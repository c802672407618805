package orientation_test

import (
	"context"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/orientation"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
)

// adoptIn stages text as candidate id for scope, by a request of session sess, and
// adopts it.
func adoptIn(tb testing.TB, st *store.Store, sess store.Session, scope store.Scope, id, text string) {
	tb.Helper()
	if err := st.Update(context.Background(), func(tx *store.Tx) error {
		req := store.Request{SessionID: sess.ID, Generation: "g-1", ExecutionID: "c-1", RequestID: "r", Method: "m", Body: []byte(`{}`)}
		if err := tx.InsertRequest(&req); err != nil {
			return err
		}
		by := store.Actor{SessionID: sess.ID, ExecutionID: "c-1", RequestID: req.ID}
		c := store.Candidate{CandidateID: id, Target: "orientation", Scope: scope, Text: text, Digest: "d-" + id, StagedBy: by}
		if _, err := tx.StageCandidate(&c, orientation.MaxCandidates); err != nil {
			return err
		}
		_, _, err := tx.AdoptCandidate(id, "op-"+id, by)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkSources measures what reading a session's adopted sources adds to each
// observation of its instruction text (one at every cell's end), in a data directory
// with one global adoption and one of the session's own: p50, p99 and CPU per read,
// read whole (read) and through a Reader with nothing adopted since its last read
// (cached), the A/B of Reader against its own removal.
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
	adoptIn(b, st, sess, store.GlobalScope, "g", "be brief\n")
	adoptIn(b, st, sess, store.SessionScope(sess), "s", "be brief\n")
	r := orientation.NewReader(st, sess.ID)
	for _, bc := range []struct {
		name string
		read func(context.Context) ([]transcript.Source, error)
	}{
		{"read", func(ctx context.Context) ([]transcript.Source, error) { return orientation.Sources(ctx, st, sess.ID) }},
		{"cached", r.Sources},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := perfstat.Start()
			for b.Loop() {
				began := time.Now()
				src, err := bc.read(ctx)
				m.Add(time.Since(began))
				if err != nil || len(src) != 1 || src[0].Text != "be brief\n" {
					b.Fatalf("%+v %v", src, err)
				}
			}
			m.Report(b, b.N)
		})
	}
}

// A Reader reads again once anything is adopted: for its session, globally, or for
// another session (which changes nothing it reads, but is read again all the same).
func TestReaderReadsAgainAfterAnAdoption(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenDir(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, _ := st.CreateSession(ctx, "a")
	b, _ := st.CreateSession(ctx, "b")
	r := orientation.NewReader(st, a.ID)
	text := func() string {
		t.Helper()
		src, err := r.Sources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want, err := orientation.Sources(ctx, st, a.ID); err != nil || len(want) != len(src) ||
			len(src) == 1 && src[0] != want[0] {
			t.Fatalf("the reader's %+v; Sources %+v, %v", src, want, err)
		}
		if len(src) == 0 {
			return ""
		}
		return src[0].Text
	}
	for _, step := range []struct {
		adopt func()
		want  string
	}{
		{func() {}, ""},
		{func() { adoptIn(t, st, b, store.GlobalScope, "g1", "global\n") }, "global\n"},
		{func() {}, "global\n"},
		{func() { adoptIn(t, st, b, store.SessionScope(b), "b1", "b's\n") }, "global\n"},
		{func() { adoptIn(t, st, a, store.SessionScope(a), "a1", "a's\n") }, "a's\n"},
		{func() { adoptIn(t, st, b, store.GlobalScope, "g2", "global 2\n") }, "a's\n"},
	} {
		step.adopt()
		if got := text(); got != step.want {
			t.Fatalf("%q; want %q", got, step.want)
		}
	}
}
