package servetests

import (
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// streamed is a piece of output as kiln exec --json prints it, in an event or a record.
type streamed struct {
	Stream string            `json:"stream"`
	Text   string            `json:"text,omitempty"`
	Data   map[string]string `json:"data,omitempty"`
}

// joined merges adjacent text of one stream, as a record keeps it: chunk boundaries are
// the runtime's to choose, and a display breaks the text around it.
func joined(outputs []streamed) []streamed {
	var out []streamed
	for _, o := range outputs {
		if n := len(out); n > 0 && o.Stream != "display" && out[n-1].Stream == o.Stream {
			out[n-1].Text += o.Text
			continue
		}
		out = append(out, o)
	}
	return out
}

// TestDaemonStreamsDisplaysInPlace: through a daemon, kiln exec --json --stream's events
// carry a display where the cell made it, and are the record's output up to its result.
func TestDaemonStreamsDisplaysInPlace(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	clitest.StartServe(t, dir)
	out := clitest.Out(t, "exec", "--data", dir, "--session", "s", "--json", "--stream", `class H:
    def __repr__(self): return "H()"
    def _repr_html_(self): return "<b>h</b>"
print("a")
display(H())
print("b")
H()`)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var events []streamed
	for _, line := range lines[:len(lines)-1] {
		var e struct {
			Event string `json:"event"`
			streamed
		}
		if err := json.Unmarshal([]byte(line), &e, json.RejectUnknownMembers(false)); err != nil || e.Event != "output" {
			t.Fatalf("event %s: %v", line, err)
		}
		events = append(events, e.streamed)
	}
	var rec struct {
		Status string     `json:"status"`
		Output []streamed `json:"output"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	display := streamed{Stream: "display", Data: map[string]string{"text/html": "<b>h</b>", "text/plain": "H()"}}
	want := []streamed{{Stream: "stdout", Text: "a\n"}, display, {Stream: "stdout", Text: "b\n"}, display} // the value's bundle before its result
	if n := len(rec.Output) - 1; rec.Status != "ok" || n < 0 || rec.Output[n].Stream != "result" || !reflect.DeepEqual(rec.Output[:n], want) {
		t.Fatalf("the record: %s %v; want ok %v then the result", rec.Status, rec.Output, want)
	}
	if got := joined(events); !reflect.DeepEqual(got, rec.Output[:len(rec.Output)-1]) {
		t.Errorf("the events are %v; want the record's output %v", got, rec.Output[:len(rec.Output)-1])
	}
}
