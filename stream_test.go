package kiln_test

import (
	"context"
	"slices"
	"testing"

	"github.com/kilnrt/kiln"
)

// TestExecuteStreamHandsOverOutput: each piece comes with its cell's id, all before the
// record, and the record's stdout and stderr are the pieces.
func TestExecuteStreamHandsOverOutput(t *testing.T) {
	wb := open(t)
	var got []string
	rec, err := wb.ExecuteStream(context.Background(), "import sys\nprint('a')\nprint('b', file=sys.stderr)\n3",
		func(id string, o kiln.Output) { got = append(got, id+" "+o.Stream+" "+o.Text) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{rec.ID + " stdout a\n", rec.ID + " stderr b\n"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q; want %q", got, want)
	}
	if len(rec.Output) != 3 || rec.Output[2] != (kiln.Output{Stream: "result", Text: "3"}) {
		t.Errorf("got record output %q", rec.Output)
	}
	rec, err = wb.Execute(context.Background(), "raise ValueError('v')")
	if err != nil || rec.Exception == nil || rec.Exception.Type != "ValueError" || rec.Exception.Value != "v" {
		t.Errorf("got %v %+v; want a ValueError in parts", err, rec.Exception)
	}
}
