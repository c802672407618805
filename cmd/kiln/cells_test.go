package main

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestLogHasTheRecordExecPrinted checks that kiln log --json has, in each cell's
// entries, the record kiln exec --json printed for the cell, with what only the log
// keeps beside it.
func TestLogHasTheRecordExecPrinted(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	cells := []string{"x = 1", "print('hi')\nx + 1", "1 / 0", "import os\nos.write(1, b'raw\\n')", "display(1)",
		"import time\ntime.sleep(60)"}
	status, stdout, stderr := runKiln(t, append([]string{"exec", "--json", "--timeout", "3s", "--data", data, "--session", "s"}, cells...)...)
	if status != exitFail || stderr != "" {
		t.Fatalf("kiln exec: %d, stderr %q; want 1 for the cell that raised", status, stderr)
	}
	printed := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		printed[rec["id"].(string)] = rec
	}
	if len(printed) != len(cells) {
		t.Fatalf("kiln exec printed %d records; want %d", len(printed), len(cells))
	}

	status, stdout, stderr = runKiln(t, "log", "--json", "--data", data, "--session", "s")
	if status != exitOK {
		t.Fatalf("kiln log: %d %s", status, stderr)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		var e struct {
			Kind   string         `json:"kind"`
			Record jsontext.Value `json:"record"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if e.Kind != "execution" && e.Kind != "execution.end" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(e.Record, &rec); err != nil {
			t.Fatal(err)
		}
		logOnly := []string{"code", "code_sha256", "ended_at", "execution_id"}
		for _, k := range logOnly {
			if _, ok := rec[k]; !ok {
				t.Errorf("%s: no %s", e.Record, k)
			}
			delete(rec, k)
		}
		id, _ := rec["id"].(string)
		seen[id]++
		if want := printed[id]; !reflect.DeepEqual(rec, want) {
			t.Errorf("kiln log --json has %s:\n%v\nkiln exec --json printed\n%v", id, rec, want)
		}
	}
	for id := range maps.Keys(printed) {
		if seen[id] != 2 {
			t.Errorf("%s in %d entries of the log; want 2, its start and its end", id, seen[id])
		}
	}
}

// TestDaemonCellRecordIsTheSame checks that a cell run through a daemon has the same
// record as one run in kiln exec's own workbench, and as kiln log --json has it.
func TestDaemonCellRecordIsTheSame(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	clitest.StartServe(t, dir)
	cmd := clitest.Command(t, "exec", "--json", "--data", dir, "--session", "D", "print('hi')", "1 / 0")
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != exitFail {
		t.Fatalf("kiln exec through the daemon: %v; want exit status 1 for the cell that raised", err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("kiln exec printed %q; want two records", lines)
	}
	_, direct, _ := runKiln(t, "exec", "--json", "--data", t.TempDir(), "--session", "D", "print('hi')", "1 / 0")
	directLines := strings.Split(strings.TrimSuffix(direct, "\n"), "\n")
	logged := map[string]map[string]any{}
	for _, line := range strings.Split(clitest.Out(t, "log", "--json", "--data", dir, "--session", "D"), "\n") {
		var e struct {
			Kind   string         `json:"kind"`
			Record map[string]any `json:"record"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Kind == "execution.end" {
			for _, k := range []string{"code", "code_sha256", "ended_at", "execution_id"} {
				delete(e.Record, k)
			}
			logged[e.Record["id"].(string)] = e.Record
		}
	}
	for i, line := range lines {
		var rec, mine map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if err := json.Unmarshal([]byte(directLines[i]), &mine); err != nil {
			t.Fatal(err)
		}
		if got, want := slices.Sorted(maps.Keys(rec)), slices.Sorted(maps.Keys(mine)); !slices.Equal(got, want) {
			t.Errorf("through the daemon the record has %q; kiln exec's own has %q", got, want)
		}
		if want := logged[rec["id"].(string)]; !reflect.DeepEqual(rec, want) {
			t.Errorf("through the daemon:\n%v\nkiln log --json:\n%v", rec, want)
		}
	}
	if !strings.Contains(lines[1], `"exception":{"type":"ZeroDivisionError","value":"division by zero"`) {
		t.Errorf("the record through the daemon has no exception: %s", lines[1])
	}
}

// TestChatShowsACellAsExecDoes checks that a cell's event from the daemon, as kiln chat
// --json prints it, has the record kiln exec --json printed.
func TestChatShowsACellAsExecDoes(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	clitest.StartServe(t, dir)
	printed := clitest.Out(t, "exec", "--json", "--data", dir, "--session", "C", "print('hi')")
	var want map[string]any
	if err := json.Unmarshal([]byte(printed), &want); err != nil {
		t.Fatalf("%s: %v", printed, err)
	}
	ctx := context.Background()
	d, err := client.DialDaemon(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ends := 0
	err = d.Events(ctx, "C", 0, false, func(e client.Event) error {
		v, err := eventOfChat(e)
		if err != nil {
			return err
		}
		var b strings.Builder
		if err := printJSON(&b, v); err != nil {
			return err
		}
		var got struct {
			Kind   string         `json:"kind"`
			Record map[string]any `json:"record"`
		}
		if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
			return err
		}
		if got.Kind != "execution.end" {
			return nil
		}
		ends++
		for _, k := range []string{"code", "code_sha256", "ended_at", "execution_id"} {
			delete(got.Record, k)
		}
		if !reflect.DeepEqual(got.Record, want) {
			t.Errorf("kiln chat --json shows\n%v\nkiln exec --json printed\n%v", got.Record, want)
		}
		return nil
	})
	if err != nil || ends != 1 {
		t.Fatalf("the daemon's events: %v, %d cell ends; want 1", err, ends)
	}
}

// TestBytesThatAreNotUTF8StayOutOfTheRecordsText has a worker write bytes that are not
// UTF-8 to its stderr and die: the cell's record says so in text, both records print,
// the next cell runs, and kiln log --json reads the whole record.
func TestBytesThatAreNotUTF8StayOutOfTheRecordsText(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	status, stdout, stderr := runKiln(t, "exec", "--json", "--data", data, "--session", "s",
		`import os, time; os.write(2, b"abc\xc3\xff def\n"); time.sleep(0.1); os._exit(3)`, `print("after")`)
	if status != exitFail || !strings.Contains(stdout, `"after\n"`) || strings.Count(stdout, "\n") != 2 {
		t.Fatalf("kiln exec: %d, stdout %q, stderr %q; want two records, the second cell's output among them", status, stdout, stderr)
	}
	if !strings.Contains(stdout, "abc\ufffd def") {
		t.Errorf("the dead worker's stderr is not in the first record as text: %q", stdout)
	}
	if status, stdout, stderr = runKiln(t, "log", "--json", "--data", data, "--session", "s"); status != exitOK || !strings.Contains(stdout, `"after\n"`) {
		t.Fatalf("kiln log --json: %d, stderr %q; want the whole record", status, stderr)
	}
}
