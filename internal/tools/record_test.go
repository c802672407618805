package tools

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
)

// TestARecordersEndGivesUpOnAToolIgnoringItsContext: End waits for a call still running
// when its run ended, up to its bound; a tool that answers within it has its call
// answered execution_ended by the recorder, and one that ignores its ctx past it has its
// call answered so by the run's end, and writes nothing once it returns; a call made
// after End is refused, not run and not recorded.
func TestARecordersEndGivesUpOnAToolIgnoringItsContext(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(ctx, "", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.CreateSession(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	run, err := st.StartProgram(ctx, sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan string, 2), make(chan struct{})
	r := New(0)
	for _, tool := range []Tool{
		{Namespace: "t", Name: "polite", Handler: func(ctx context.Context, _ jsontext.Value) (jsontext.Value, error) {
			started <- "polite"
			<-ctx.Done()
			return jsontext.Value(`"late"`), nil
		}},
		{Namespace: "t", Name: "deaf", Handler: func(context.Context, jsontext.Value) (jsontext.Value, error) {
			started <- "deaf"
			<-release
			return jsontext.Value(`"later"`), nil
		}},
	} {
		if err := r.Add(tool); err != nil {
			t.Fatal(err)
		}
	}
	rec := NewRecorder(st, sess.ID, run.RunID)
	rec.endWait = 100 * time.Millisecond
	runCtx, settle := context.WithCancel(ctx)
	errs := make(chan error, 2)
	for _, name := range []string{"polite", "deaf"} {
		go func() {
			_, err := rec.call(runCtx, r, "t", name, nil)
			errs <- err
		}()
		<-started // its request is recorded
	}
	settle() // the run settles
	if err := <-errs; err == nil || !strings.HasPrefix(err.Error(), host.CodeExecutionEnded+": ") {
		t.Fatalf("the polite call: %v", err)
	}
	rec.End()
	if _, err := rec.call(ctx, r, "t", "polite", nil); err == nil || !strings.HasPrefix(err.Error(), host.CodeExecutionEnded+": ") {
		t.Fatalf("a call after the end: %v", err)
	}
	if err := st.EndProgram(ctx, run.ID, store.ProgramEnd{Status: "ok", Unanswered: rec.Unanswered()}); err != nil {
		t.Fatal(err)
	}
	close(release)
	var refusal *Refusal
	if err := <-errs; !errors.As(err, &refusal) || refusal.Code != host.CodeExecutionEnded {
		t.Fatalf("the deaf call: %v", err)
	}
	log, err := st.Log(ctx, store.LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range log {
		s := e.Kind
		if q, ok := e.Record.(store.RequestRecord); ok {
			s += " " + q.RequestID
			if e.Kind == store.KindReply {
				s += " " + q.Reply.Kind + " " + q.Reply.Code + " " + q.Reply.Message
			}
		}
		got = append(got, s)
	}
	const ended = "error execution_ended run p-1 ended before the tool answered"
	want := []string{"session", "program", "request r-1", "request r-2", "reply r-1 " + ended, "reply r-2 " + ended, "program.end"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
