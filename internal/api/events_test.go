package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/go-json-experiment/json"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
)

// TestAnEventsExecutionIDIsTheExecutions: every record of the event stream that names a
// cell names it by the execution id the API gives and takes, <session>:c-N; passed to
// GET /v1/executions/{eid}, it is that cell's record.
func TestAnEventsExecutionIDIsTheExecutions(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	var rec record
	resp, data := d.do("POST", "/v1/sessions/s/executions", map[string]any{"code": "print('hi')\n6 * 7", "wait_ms": 10000})
	d.want(resp, data, 200, &rec)
	resp, data = d.do("GET", "/v1/sessions/s/events?follow=0", nil)
	d.want(resp, data, 200, nil)
	kinds := map[string]bool{}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e struct {
			Kind   string `json:"kind"`
			Record struct {
				ExecutionID *string `json:"execution_id"`
				Cell        string  `json:"cell"`
			} `json:"record"`
		}
		if err := json.Unmarshal(line, &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		if e.Record.ExecutionID == nil {
			continue
		}
		kinds[e.Kind] = true
		if *e.Record.ExecutionID != rec.ID || e.Record.Cell != "c-1" {
			t.Fatalf("a %s event names %q, cell %q; want %q, c-1", e.Kind, *e.Record.ExecutionID, e.Record.Cell, rec.ID)
		}
		var got record
		resp, body := d.do("GET", "/v1/executions/"+*e.Record.ExecutionID, nil)
		d.want(resp, body, 200, &got)
		if got.ID != rec.ID {
			t.Fatalf("GET of a %s event's execution id: %+v; want %s", e.Kind, got, rec.ID)
		}
	}
	for _, kind := range []string{"execution", "execution.end", "output"} {
		if !kinds[kind] {
			t.Errorf("no %s event named the execution: %v", kind, kinds)
		}
	}
}

// TestABodyInAnotherCharsetIsRefused: a JSON body said to be in a charset other than
// UTF-8 is refused (415), not read as UTF-8; UTF-8 named in any case is taken.
func TestABodyInAnotherCharsetIsRefused(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	resp, data := d.do("POST", "/v1/sessions", `{"id":"cs"}`, "Content-Type", "application/json; charset=latin-1")
	d.want(resp, data, http.StatusUnsupportedMediaType, nil)
	wantCode(t, data, api.CodeMediaType)
	resp, data = d.do("POST", "/v1/sessions", `{"id":"cs"}`, "Content-Type", "application/json; charset=UTF-8")
	d.want(resp, data, http.StatusCreated, nil)
}
