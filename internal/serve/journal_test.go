package serve

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/kilnrt/kiln/internal/wire"
)

// recorder is a store's output journal as a test sees it: each write it took, failing
// from the fail-th on (0: never).
type recorder struct {
	mu     sync.Mutex
	writes []wire.Output
	fail   int
}

func (r *recorder) record(stream, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 && len(r.writes)+1 >= r.fail {
		return errors.New("the store refuses")
	}
	r.writes = append(r.writes, wire.Output{Stream: stream, Text: text})
	return nil
}

// liveChunks is what a reader of live is shown, once it has ended.
func liveChunks(t *testing.T, x *Execution) []wire.Output {
	t.Helper()
	chunks, ended, _, err := x.Output(context.Background(), 0)
	if err != nil || !ended {
		t.Fatalf("output: ended %v, %v", ended, err)
	}
	var out []wire.Output
	for _, c := range chunks {
		out = append(out, wire.Output{Stream: c.Stream, Text: c.Text, Data: c.Data})
	}
	return out
}

// TestADisplayBreaksTheJournalsWindow: text on either side of a display, within one
// window, is written as two pieces, and live readers are shown the display between them.
func TestADisplayBreaksTheJournalsWindow(t *testing.T) {
	r := &recorder{}
	x := &Execution{live: newLiveOutput()}
	j := newJournal(r.record, x.live)
	display := wire.Output{Stream: wire.StreamDisplay, Data: map[string]string{wire.MIMEPlain: "H()"}}
	for _, o := range []wire.Output{{Stream: "stdout", Text: "a\n"}, display, {Stream: "stdout", Text: "b\n"}} {
		j.add(o)
	}
	j.close()
	x.live.end()
	if want := []wire.Output{{Stream: "stdout", Text: "a\n"}, {Stream: "stdout", Text: "b\n"}}; !reflect.DeepEqual(r.writes, want) {
		t.Errorf("written %q; want %q", r.writes, want)
	}
	if got, want := liveChunks(t, x), []wire.Output{{Stream: "stdout", Text: "a\n"}, display, {Stream: "stdout", Text: "b\n"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("shown %q; want %q", got, want)
	}
	if !x.Live() {
		t.Error("a journal written whole is not live")
	}
}

// TestAFailedJournalWriteEndsTheLiveOutput: once a write fails, live readers are shown
// nothing more and told the output is not live, so they read the rest from the record;
// the journal writes no more, so what it holds is a prefix of the output.
func TestAFailedJournalWriteEndsTheLiveOutput(t *testing.T) {
	r := &recorder{fail: 2}
	x := &Execution{live: newLiveOutput()}
	j := newJournal(r.record, x.live)
	for _, o := range []wire.Output{{Stream: "stdout", Text: "a"}, {Stream: "stderr", Text: "e"}, {Stream: "stdout", Text: "b"}} {
		j.add(o)
	}
	j.close()
	if got, want := liveChunks(t, x), []wire.Output{{Stream: "stdout", Text: "a"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("shown %q; want %q", got, want)
	}
	if x.Live() {
		t.Error("after a failed write the output is still live")
	}
	r.fail = 0
	if want := []wire.Output{{Stream: "stdout", Text: "a"}}; !reflect.DeepEqual(r.writes, want) {
		t.Errorf("written %q; want %q: nothing past the failure", r.writes, want)
	}
}
