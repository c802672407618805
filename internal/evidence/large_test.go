package evidence_test

import (
	"context"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
)

// Resolving 64 refs to an execution of 64 KiB of output is an answer of over 4 MiB:
// it is refused reply_too_large, and the refusal is in the record; fewer refs are
// answered.
func TestAnAnswerTooLargeForAReplyIsRefusedAndRecorded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{DataDir: dir, Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	if rec, err := wb.Execute(ctx, `print("x" * 65535)`); err != nil || rec.Status != kiln.StatusOK {
		t.Fatalf("%+v %v", rec, err)
	}
	rec, err := wb.Execute(ctx, `async def resolve(n):
    try:
        return len((await runtime.evidence.resolve(["execution:c-1"] * n))["results"])
    except Exception as e:
        return e.code
(await resolve(8), await resolve(64))`)
	if want := "(8, '" + host.CodeReplyTooLarge + "')"; err != nil || len(rec.Output) != 1 || rec.Output[0].Text != want {
		t.Fatalf("%+v %v; want %s", rec, err, want)
	}
	wb.Close()
	st, err := store.OpenDir(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	entries, err := st.Log(ctx, store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, e := range entries {
		if r, ok := e.Record.(store.RequestRecord); ok && e.Kind == store.KindReply && r.Method == "evidence.resolve" {
			codes = append(codes, r.Reply.Kind+" "+r.Reply.Code)
		}
	}
	if len(codes) != 2 || codes[0] != "ok " || codes[1] != "error "+host.CodeReplyTooLarge {
		t.Errorf("recorded replies %q; want ok, then error %s", codes, host.CodeReplyTooLarge)
	}
}
