package kiln_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
)

// TestExecuteStreamHandsOverOutput: each piece comes with its cell's id, all before the
// record, and the record's stdout and stderr are the pieces.
func TestExecuteStreamHandsOverOutput(t *testing.T) {
	t.Parallel()
	wb := open(t)
	var got []string
	rec, err := wb.ExecuteStream(context.Background(), "import sys\nprint('a')\nprint('b', file=sys.stderr)\n3",
		func(id string, o kiln.Output) {
			// Chunk boundaries are the runtime's to choose: join a stream's adjacent pieces.
			if last := len(got) - 1; last >= 0 && strings.HasPrefix(got[last], id+" "+o.Stream+" ") {
				got[last] += o.Text
				return
			}
			got = append(got, id+" "+o.Stream+" "+o.Text)
		})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{rec.ID + " stdout a\n", rec.ID + " stderr b\n"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q; want %q", got, want)
	}
	if len(rec.Output) != 3 || rec.Output[2].Stream != "result" || rec.Output[2].Text != "3" {
		t.Errorf("got record output %q", rec.Output)
	}
	rec, err = wb.Execute(context.Background(), "raise ValueError('v')")
	if err != nil || rec.Exception == nil || rec.Exception.Type != "ValueError" || rec.Exception.Value != "v" {
		t.Errorf("got %v %+v; want a ValueError in parts", err, rec.Exception)
	}
}

// TestInputIsAskedOfTheHost: input() and sys.stdin.readline() are answered by OnInput,
// which sees the prompt; an interrupt ends a cell blocked in input(); with no OnInput,
// input() raises EOFError.
func TestInputIsAskedOfTheHost(t *testing.T) {
	t.Parallel()
	asked := make(chan string, 4)
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{
		OnInput: func(ctx context.Context, cellID, prompt string) (string, error) {
			asked <- prompt
			if prompt == "hang? " {
				<-ctx.Done()
				return "", ctx.Err()
			}
			if prompt == "" {
				return "", io.EOF
			}
			return "answer to " + prompt, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	rec, err := wb.Execute(context.Background(), "import sys\n(input('q? '), sys.stdin.readline())")
	if err != nil || rec.Status != kiln.StatusOK || rec.Output[0].Text != "('answer to q? ', '')" {
		t.Fatalf("got %v %s %q", err, rec.Status, rec.Output)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for p := range asked {
			if p == "hang? " {
				cancel()
			}
		}
	}()
	rec, err = wb.Execute(ctx, "input('hang? ')")
	close(asked)
	if err != nil || rec.Status != kiln.StatusInterrupted || rec.NamespaceLost {
		t.Errorf("got %v %s %v; want interrupted, the namespace kept", err, rec.Status, rec.NamespaceLost)
	}

	plain := open(t)
	rec, _ = plain.Execute(context.Background(), "input()")
	if rec.Exception == nil || rec.Exception.Type != "EOFError" || rec.Exception.Value != "no one to answer input() here" {
		t.Errorf("got %+v; want EOFError", rec.Exception)
	}
}

// TestCompleteNamesOfTheNamespace asks the live namespace, as Python's REPL would.
func TestCompleteNamesOfTheNamespace(t *testing.T) {
	t.Parallel()
	wb := open(t)
	if _, err := wb.Execute(context.Background(), "import json\nmy_value = 1"); err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]string{"my_v": "my_value", "json.dum": "json.dumps(", "pri": "print("} {
		got, err := wb.Complete(context.Background(), text)
		if err != nil || !slices.Contains(got, want) {
			t.Errorf("Complete(%q): got %q, %v; want %q among them", text, got, err, want)
		}
	}
	if got, err := wb.Complete(context.Background(), " "); err != nil || len(got) != 0 {
		t.Errorf("blank: got %q, %v; want none", got, err)
	}
	if rec, err := wb.Execute(context.Background(), "my_value + 1"); err != nil || rec.Output[0].Text != "2" {
		t.Errorf("after completions: got %v %q", err, rec.Output)
	}
}
