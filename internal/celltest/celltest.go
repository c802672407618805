// Package celltest makes host requests from the cells of a real workbench (a real
// python3 worker over its socket), for the tests of a family of host methods.
package celltest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
)

// defineCell defines, in a workbench's namespace, attempt(method, **params): the
// reply, or the refusal as {"code": …, "message": …}; and reply_or_code(method,
// **params): the reply as JSON, or the refusal's code.
const defineCell = `import json
async def attempt(method, **params):
    try:
        return await runtime.request(method, **params)
    except runtime.HostError as e:
        return {"code": e.code, "message": str(e)}

async def reply_or_code(method, **params):
    r = await attempt(method, **params)
    return r["code"] if isinstance(r, dict) and set(r) == {"code", "message"} else json.dumps(r)
`

// Open opens session of the data directory dir, with attempt and reply_or_code
// defined in its namespace; it is closed when the test ends.
func Open(t testing.TB, dir, session string) *kiln.Workbench {
	t.Helper()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: dir, SessionID: session, Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	if rec, err := wb.Execute(context.Background(), defineCell); err != nil || rec.Status != kiln.StatusOK {
		t.Fatalf("%+v %v", rec, err)
	}
	return wb
}

// Call runs code, a cell that prints one line of JSON, and decodes the line into v.
func Call(t testing.TB, wb *kiln.Workbench, code string, v any) {
	t.Helper()
	rec, err := wb.Execute(context.Background(), code)
	if err != nil || rec.Status != kiln.StatusOK || len(rec.Output) == 0 {
		t.Fatalf("%+v %v", rec, errors.Join(err, recordError(rec)))
	}
	if err := json.Unmarshal([]byte(rec.Output[0].Text), v); err != nil {
		t.Fatalf("%q: %v", rec.Output[0].Text, err)
	}
}

// recordError is what the record says went wrong, nil for nothing.
func recordError(rec kiln.Record) error {
	if rec.Error != nil {
		return errors.New(*rec.Error)
	}
	return nil
}

// Attempt makes one request of method with params (Python keyword arguments) in a
// cell, and returns its reply as JSON, or its refusal's code. It may be called from
// any goroutine: a cell that fails is an error of t, and its record the result.
func Attempt(t testing.TB, wb *kiln.Workbench, method, params string) string {
	t.Helper()
	rec, err := wb.Execute(context.Background(), `print(await reply_or_code("`+method+`", `+params+`))`)
	if err != nil || rec.Status != kiln.StatusOK || len(rec.Output) != 1 {
		t.Errorf("%s(%s): %+v %v", method, params, rec, err)
		return "<failed>"
	}
	return strings.TrimSuffix(rec.Output[0].Text, "\n")
}
