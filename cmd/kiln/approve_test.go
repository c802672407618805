package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// heldCell follows the session's events after seq until a cell is held, and returns
// the cell and the event's seq.
func heldCell(t *testing.T, dir, session string, after int64) (string, int64) {
	t.Helper()
	e := followUntil(t, dir, session, after, func(e client.Event) bool { return e.Kind == "execution.review" })
	var entry struct {
		Record struct {
			Body struct {
				Cell string `json:"cell"`
			} `json:"body"`
		} `json:"record"`
	}
	if err := json.Unmarshal(e.Raw, &entry, json.RejectUnknownMembers(false)); err != nil || entry.Record.Body.Cell == "" {
		t.Fatalf("a hold's event: %s %v", e.Raw, err)
	}
	return entry.Record.Body.Cell, e.Seq
}

// TestOperatorApprovesCellsBeforeTheyRun: with review = "hold", each cell of the agent
// waits for a decision once its start is recorded. kiln approve lets one run; a
// rejection over HTTP ends the next unrun, and the model reads the reason as its result;
// a decision for a cell not held is 409 not_held. A cell held as the daemon is killed
// never runs: the daemon, started again, records its hold abandoned and ends the turn
// host_died.
func TestOperatorApprovesCellsBeforeTheyRun(t *testing.T) {
	srv := routetest.New(t, routetest.Anthropic,
		routetest.Step{Code: routetest.Code(`await runtime.request("local.send", text="ran one")`)},
		routetest.Step{Code: routetest.Code(`print("never")`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="done")`)})
	dir := shortTemp(t)
	cfg := "[routes.a]\nkind = \"anthropic\"\nbase_url = \"" + srv.URL + "\"\nmodel = \"claude-test\"\ncontext_tokens = 200000\n\n" +
		"[agent]\nroute = \"a\"\nreview = \"hold\"\nreview_timeout_s = 600\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"a"}`, 201, nil)
	s.call("POST", "/v1/sessions/a/inputs", `{"text":"go"}`, 201, nil)

	cell, seq := heldCell(t, dir, "a", 0)
	var held struct {
		Held []struct {
			Cell string `json:"cell"`
		} `json:"held"`
	}
	s.call("GET", "/v1/sessions/a/held", "", 200, &held)
	if len(held.Held) != 1 || held.Held[0].Cell != cell {
		t.Fatalf("held: %+v; want %s", held, cell)
	}
	var rec execRecord
	s.call("GET", "/v1/executions/a:"+cell, "", 200, &rec)
	if rec.Status != "running" || len(rec.Output) != 0 {
		t.Fatalf("a held cell ran: %+v", rec)
	}
	if out := kilnOut(t, "approve", "--data", dir, "a:"+cell); strings.TrimSpace(out) != cell+" approved" {
		t.Fatalf("kiln approve: %q", out)
	}
	followUntil(t, dir, "a", seq, func(e client.Event) bool { return strings.Contains(string(e.Raw), "ran one") })

	second, seq := heldCell(t, dir, "a", seq)
	var p struct {
		Code string `json:"code"`
	}
	s.call("POST", "/v1/executions/a:"+cell+"/approve", "", 409, &p)
	if p.Code != "not_held" {
		t.Errorf("approving a cell that ran: %q", p.Code)
	}
	var d struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	s.call("POST", "/v1/executions/a:"+second+"/reject", `{"reason":"not that file \u00e9"}`, 200, &d)
	if d.Decision != "rejected" || d.Reason != "not that file é" {
		t.Errorf("the rejection: %+v", d)
	}
	third, _ := heldCell(t, dir, "a", seq)
	s.call("GET", "/v1/executions/a:"+second, "", 200, &rec)
	if rec.Status != "failed" || rec.Error == nil || !strings.Contains(*rec.Error, "not that file") || len(rec.Output) != 0 {
		t.Errorf("the rejected cell's record: %+v", rec)
	}
	if bodies := srv.Bodies(); len(bodies) < 3 || !strings.Contains(string(bodies[2]), "not that file") {
		t.Errorf("the model did not read the rejection as the cell's result")
	}

	s.kill(waitForChild(t, s.cmd.Process.Pid))
	s = startServe(t, dir)
	s.call("POST", "/v1/executions/a:"+third+"/approve", "", 409, &p)
	if p.Code != "not_held" {
		t.Errorf("approving a hold of a daemon that died: %q", p.Code)
	}
	e := followUntil(t, dir, "a", 0, func(e client.Event) bool {
		return e.Kind == "execution.decision" && strings.Contains(string(e.Raw), `"abandoned"`)
	})
	if !strings.Contains(string(e.Raw), `"`+third+`"`) {
		t.Errorf("the abandoned hold: %s", e.Raw)
	}
	followUntil(t, dir, "a", 0, func(e client.Event) bool {
		return e.Kind == "turn.end" && strings.Contains(string(e.Raw), "host_died")
	})
}
