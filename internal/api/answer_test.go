package api_test

import (
	"bytes"
	"testing"

	kilndaemon "github.com/kilnrt/kiln/daemon"
)

// TestAnAnswerIsTheRecordAsItReads runs cells of every ending through POST …/executions
// and checks that each 200 answer, made from the end as it was recorded, is byte for byte
// what the record reads back (GET /v1/executions/{eid}): the answer's shortcut against
// the general path.
func TestAnAnswerIsTheRecordAsItReads(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	cells := []string{
		"1+1",
		"print('out é', flush=True)\nimport sys; sys.stderr.write('err\\n')\n'done'",
		"raise ValueError('bad \\u00e9')",
		"x = 1",
		"from kiln import display\ndisplay.markdown('# hi')",
		"import os; os._exit(3)",
		"x", // a new generation: its namespace is fresh
		"2**64",
		"print('\\ud800' if False else 'é' * 5000)",
	}
	for _, code := range cells {
		resp, answered := d.do("POST", "/v1/sessions/s/executions", map[string]any{"code": code, "wait_ms": 30000})
		var rec record
		d.want(resp, answered, 200, &rec)
		got, read := d.do("GET", "/v1/executions/"+rec.ID, nil)
		d.want(got, read, 200, nil)
		if !bytes.Equal(answered, read) {
			t.Errorf("%q: answered\n%s\nthe record reads\n%s", code, answered, read)
		}
	}
}
