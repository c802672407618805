package wait_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/kilnrt/kiln"
)

// The agent's own speech is not input pending for it: its wait yields, and inspect
// lists nothing pending, until another sends something.
func TestTheAgentsOwnSpeechIsNotPendingInput(t *testing.T) {
	ctx := context.Background()
	wb, err := kiln.OpenWorkbench(ctx, kiln.WorkbenchOptions{DataDir: t.TempDir(), Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	for _, c := range []struct {
		code   string
		status kiln.CellStatus
		want   string
	}{
		{`(await runtime.request("local.send", text="hi"))["status"]`, kiln.StatusOK, "'confirmed'"},
		{`(await runtime.inspect())["pending_inputs"]`, kiln.StatusOK, "[]"},
		{`await runtime.wait(None, "w")`, kiln.StatusYielded, ""},
	} {
		rec, err := wb.Execute(ctx, c.code)
		if err != nil || rec.Status != c.status || (c.want != "" && (len(rec.Output) != 1 || rec.Output[0].Text != c.want)) {
			t.Fatalf("%s: %+v %v; want %s %s", c.code, rec, err, c.status, c.want)
		}
	}
	id, err := wb.Input(ctx, "from the operator")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := wb.Execute(ctx, `r = await runtime.wait(None, "w")
(r["status"], r["inputs"])`)
	if want := "('input_pending', ['event:" + strconv.FormatInt(id, 10) + "'])"; err != nil || len(rec.Output) != 1 || rec.Output[0].Text != want {
		t.Errorf("after an operator input: %+v %v; want %s", rec, err, want)
	}
}
