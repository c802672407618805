package kiln_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/journal"
)

// TestSendRecordsAnInputAndItsAttention checks that Send, with no workbench and no
// daemon, records an operator input of a session and the initial policy's decision for
// it, as the record then shows; and that it refuses, recording nothing, a text past the
// bound, a session the record lacks, and a directory with no record.
func TestSendRecordsAnInputAndItsAttention(t *testing.T) {
	t.Parallel()
	data, ctx := t.TempDir(), context.Background()
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{DataDir: data, Workspace: t.TempDir(), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("é", admin.MaxSendText) // at the bound, in characters
	if err := admin.ValidSendText(text); err != nil {
		t.Errorf("ValidSendText at the bound: %v", err)
	}
	in, err := admin.Send(ctx, data, "s", text)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID == 0 || in.Ref != journal.InputRef(in.ID) || in.Attention.Action != client.AttentionWake || in.Attention.Priority == nil {
		t.Errorf("got %+v", in)
	}
	for _, c := range []struct {
		session, text string
		want          error
	}{
		{"s", text + "é", kiln.ErrInvalidInput},
		{"s", "", kiln.ErrInvalidInput},
		{"s", "\xff", kiln.ErrInvalidInput},
		{"nobody", "hello", journal.ErrNoSession},
	} {
		if got, err := admin.Send(ctx, data, c.session, c.text); !errors.Is(err, c.want) || got.ID != 0 {
			t.Errorf("%s %.10q: got %+v, %v; want %v", c.session, c.text, got, err, c.want)
		}
		if c.want == kiln.ErrInvalidInput {
			if err := admin.ValidSendText(c.text); !errors.Is(err, kiln.ErrInvalidInput) {
				t.Errorf("ValidSendText(%.10q): %v; want %v", c.text, err, c.want)
			}
		}
	}
	wb, err = kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{DataDir: data, Workspace: t.TempDir(), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{text + "é", "", "\xff"} {
		if id, err := wb.Input(ctx, bad); !errors.Is(err, kiln.ErrInvalidInput) || id != 0 {
			t.Errorf("Workbench.Input(%.10q): %d, %v; want %v", bad, id, err, kiln.ErrInvalidInput)
		}
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	if _, err := admin.Send(ctx, empty, "s", "hello"); !errors.Is(err, journal.ErrNoRecord) {
		t.Errorf("no record: %v", err)
	}
	if got := files(t, empty); len(got) != 0 {
		t.Errorf("made: %q", got)
	}

	j, err := journal.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	log, err := j.Log(ctx, journal.LogFilter{Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var inputs []journal.LogInput
	for _, e := range log {
		if r, ok := e.Record.(journal.LogInput); ok {
			inputs = append(inputs, r)
		}
	}
	if len(inputs) != 1 || inputs[0].ID != in.ID || inputs[0].Source != journal.SourceOperator ||
		!strings.Contains(string(inputs[0].Attention), `"action":"wake"`) {
		t.Errorf("the inputs recorded: %+v", inputs)
	}
}
