package evidence

import (
	"context"
	"testing"

	"github.com/kilnrt/kiln/internal/store"
)

func TestResolve(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, _ := st.CreateSession(ctx, "a")
	b, _ := st.CreateSession(ctx, "b")
	ev, _ := st.AppendEvent(ctx, a.ID, store.SourceOperator, "hi")
	other, _ := st.AppendEvent(ctx, b.ID, store.SourceOperator, "not yours")
	e, _ := st.StartExecution(ctx, a.ID, "g-1", "1")
	refs := []string{"event:1", "event:2", "execution:" + e.CellID, "execution:c-9", "execution:bad id",
		"request:1", "wait:0", "effect:-1", "event:x", "nope:1", "event", "", "event:"}
	want := []string{"event", CodeNotFound, "execution", CodeNotFound, CodeMalformed,
		CodeNotFound, CodeMalformed, CodeMalformed, CodeMalformed, CodeMalformed, CodeMalformed, CodeMalformed, CodeMalformed}
	_ = ev
	_ = other
	for i, r := range Resolve(ctx, st, a.ID, refs) {
		got := r.Kind
		if r.Error != nil {
			got = r.Error.Code
		}
		if got != want[i] || r.Ref != refs[i] {
			t.Errorf("%q: got %q (%+v); want %q", refs[i], got, r.Error, want[i])
		}
	}
}

func FuzzResolve(f *testing.F) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	s, _ := st.CreateSession(ctx, "a")
	st.AppendEvent(ctx, s.ID, store.SourceOperator, "hi")
	for _, ref := range []string{"event:1", "execution:c-1", "request:9223372036854775807", "wait:99999999999999999999", ":", "event:1:2"} {
		f.Add(ref)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		r := Resolve(ctx, st, s.ID, []string{ref})[0]
		if (r.Error == nil) == (r.Record == nil) {
			t.Errorf("%q: a result must be a record or an error: %+v", ref, r)
		}
	})
}
