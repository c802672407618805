package agenttests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/route/routetest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// agentDataDir is a data directory whose kiln.toml routes the agent to srv, an
// Anthropic server, with agent, more lines under [agent].
func agentDataDir(t *testing.T, srv *routetest.Server, agent string) string {
	t.Helper()
	dir := clitest.ShortTemp(t)
	cfg := "[routes.a]\nkind = \"anthropic\"\nbase_url = \"" + srv.URL + "\"\nmodel = \"claude-test\"\ncontext_tokens = 200000\n\n" +
		"[agent]\nroute = \"a\"\n" + agent
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// heldCell follows the session's events after seq until a cell is held, and returns
// the cell and the event's seq.
func heldCell(t *testing.T, dir, session string, after int64) (string, int64) {
	t.Helper()
	e := clitest.FollowUntil(t, dir, session, after, func(e client.Event) bool {
		return e.Kind == "execution.review" && strings.Contains(string(e.Raw), `"verdict":"hold"`)
	})
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
// stays held: the daemon, started again, ends the turn host_died and lists the hold;
// approving it resumes the turn, and the code the model sends again runs unheld.
func TestOperatorApprovesCellsBeforeTheyRun(t *testing.T) {
	t.Parallel()
	srv := routetest.New(t, routetest.Anthropic,
		routetest.Step{Code: routetest.Code(`await runtime.request("local.send", text="ran one")`)},
		routetest.Step{Code: routetest.Code(`print("never")`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="done")`)})
	dir := agentDataDir(t, srv, "review = \"hold\"\nreview_timeout_s = 600\n")
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"a"}`, 201, nil)
	s.Call("POST", "/v1/sessions/a/inputs", `{"text":"go"}`, 201, nil)

	cell, seq := heldCell(t, dir, "a", 0)
	var held struct {
		Held []struct {
			Cell string `json:"cell"`
		} `json:"held"`
	}
	s.Call("GET", "/v1/sessions/a/held", "", 200, &held)
	if len(held.Held) != 1 || held.Held[0].Cell != cell {
		t.Fatalf("held: %+v; want %s", held, cell)
	}
	var rec clitest.ExecRecord
	s.Call("GET", "/v1/executions/a:"+cell, "", 200, &rec)
	if rec.Status != "running" || len(rec.Output) != 0 {
		t.Fatalf("a held cell ran: %+v", rec)
	}
	if out := clitest.Out(t, "approve", "--data", dir, "a:"+cell); strings.TrimSpace(out) != cell+" approved" {
		t.Fatalf("kiln approve: %q", out)
	}
	clitest.FollowUntil(t, dir, "a", seq, func(e client.Event) bool { return strings.Contains(string(e.Raw), "ran one") })

	second, seq := heldCell(t, dir, "a", seq)
	var p struct {
		Code string `json:"code"`
	}
	s.Call("POST", "/v1/executions/a:"+cell+"/approve", "", 409, &p)
	if p.Code != "not_held" {
		t.Errorf("approving a cell that ran: %q", p.Code)
	}
	var d struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	s.Call("POST", "/v1/executions/a:"+second+"/reject", `{"reason":"not that file \u00e9"}`, 200, &d)
	if d.Decision != "rejected" || d.Reason != "not that file é" {
		t.Errorf("the rejection: %+v", d)
	}
	third, _ := heldCell(t, dir, "a", seq)
	s.Call("GET", "/v1/executions/a:"+second, "", 200, &rec)
	if rec.Status != "failed" || rec.Error == nil || !strings.Contains(*rec.Error, "not that file") || len(rec.Output) != 0 {
		t.Errorf("the rejected cell's record: %+v", rec)
	}
	if bodies := srv.Bodies(); len(bodies) < 3 || !strings.Contains(string(bodies[2]), "not that file") {
		t.Errorf("the model did not read the rejection as the cell's result")
	}

	s.Kill(clitest.WaitForChild(t, s.Cmd.Process.Pid))
	s = clitest.StartServe(t, dir)
	var again struct {
		Held []struct {
			Cell      string `json:"cell"`
			Restarted bool   `json:"restarted"`
		} `json:"held"`
	}
	s.Call("GET", "/v1/sessions/a/held", "", 200, &again)
	if len(again.Held) != 1 || again.Held[0].Cell != third || !again.Held[0].Restarted {
		t.Fatalf("held after a restart: %+v; want %s", again, third)
	}
	clitest.FollowUntil(t, dir, "a", 0, func(e client.Event) bool {
		return e.Kind == "turn.end" && strings.Contains(string(e.Raw), "host_died")
	})
	srv.Add(routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="done")`)})
	s.Call("POST", "/v1/executions/a:"+third+"/approve", "", 200, &d)
	if d.Decision != "approved" {
		t.Errorf("approving a hold carried over a restart: %+v", d)
	}
	// The approval resumes the turn: the model reads it, sends the code again, and the
	// code runs without a second hold.
	e := clitest.FollowUntil(t, dir, "a", 0, func(e client.Event) bool {
		return e.Kind == "execution.decision" && strings.Contains(string(e.Raw), "which the operator approved after the host restarted")
	})
	if !strings.Contains(string(e.Raw), third) {
		t.Errorf("the approval of the code sent again: %s", e.Raw)
	}
	if bodies := srv.Bodies(); !strings.Contains(string(bodies[len(bodies)-1]), "The operator approved cell "+third) {
		t.Errorf("the model did not read the approval")
	}
	clitest.FollowUntil(t, dir, "a", 0, func(e client.Event) bool {
		return e.Kind == "turn.end" && clitest.EndReason(t, e) == "waited"
	})
	s.Call("GET", "/v1/sessions/a/held", "", 200, &again)
	if len(again.Held) != 0 {
		t.Errorf("held after the approval: %+v", again)
	}
}

// reviewPolicy is a release whose execution.review entrypoint holds a cell that names
// rmtree and allows the rest.
var reviewPolicy = map[string]string{
	"manifest.json": `{"version":1,"hooks":{"attention.plan":"rev:attention","delivery.review":"rev:delivery",` +
		`"execution.review":"rev:execution"}}`,
	"rev.py": `from kiln_hooks import Allow, Hold, Wake

def attention(request, context):
    return Wake(100 if request.source == "operator" else 50)

def delivery(request, context):
    return Allow()

def execution(request, context):
    if "rmtree" in request.code:
        return Hold(f"{request.cell} removes a tree")
    return Allow()
`,
}

// TestAPolicyHookHoldsCells: with the default review (allow), the active release's
// execution.review entrypoint decides: a cell it allows runs, and its allow is
// recorded; one it holds waits for the operator, with the hook's reason. Over MCP
// (kiln mcp attached to the daemon), held lists it, reject ends it unrun and the model
// reads the reason as its result, and approve lets the next one run; model_deltas reads
// the pieces of the call that wrote it, of the session and of every session.
func TestAPolicyHookHoldsCells(t *testing.T) {
	srv := routetest.New(t, routetest.Anthropic,
		routetest.Step{Code: routetest.Code(`print("allowed")`)},
		routetest.Step{Code: routetest.Code(`import shutil; shutil.rmtree("nothing")`)},
		routetest.Step{Code: routetest.Code(`import shutil; shutil.rmtree("nothing", ignore_errors=True); print("removed")`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="done")`)})
	dir := agentDataDir(t, srv, "")
	src := t.TempDir()
	for name, text := range reviewPolicy {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	id := strings.TrimSpace(clitest.Out(t, "release", "build", "--data", dir, src))
	clitest.Out(t, "release", "activate", "--data", dir, id, "--expected-epoch", "0")
	if out := clitest.Out(t, "hooks", "list", "--data", dir); !strings.Contains(out, "execution.review") {
		t.Fatalf("hooks list: %s", out)
	}

	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"h"}`, 201, nil)
	s.Call("POST", "/v1/sessions/h/inputs", `{"text":"go"}`, 201, nil)
	cell, seq := heldCell(t, dir, "h", 0)
	cs, err := clitest.NewMCPClient(new(atomic.Int64)).Connect(context.Background(),
		&mcp.CommandTransport{Command: clitest.Command(t, "mcp", "--data", dir)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var held struct {
		Held []struct {
			Cell   string `json:"cell"`
			Reason string `json:"reason"`
		} `json:"held"`
	}
	clitest.CallTool(t, cs, "held", map[string]any{"session": "h"}, &held)
	if len(held.Held) != 1 || held.Held[0].Cell != cell || !strings.Contains(held.Held[0].Reason, cell+" removes a tree") {
		t.Fatalf("held: %+v", held)
	}
	clitest.FollowUntil(t, dir, "h", 0, func(e client.Event) bool {
		return e.Kind == "execution.review" && strings.Contains(string(e.Raw), `"allow"`)
	})
	var d struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	type deltas struct {
		Deltas []struct {
			Session string `json:"session"`
			Delta   string `json:"delta"`
			Text    string `json:"text"`
		} `json:"deltas"`
		Cursor string `json:"cursor"`
	}
	var own, every deltas // the cursors of now: the pieces after them are the next call's
	clitest.CallTool(t, cs, "model_deltas", map[string]any{"session": "h", "wait_ms": 0}, &own)
	clitest.CallTool(t, cs, "model_deltas", map[string]any{"wait_ms": 0}, &every)
	if len(own.Deltas) != 0 || own.Cursor == "" || every.Cursor == "" {
		t.Fatalf("model_deltas from now: %+v %+v", own, every)
	}
	clitest.CallTool(t, cs, "reject", map[string]any{"execution_id": "h:" + cell, "reason": "keep the tree"}, &d)
	if d.Decision != "rejected" || d.Reason != "keep the tree" {
		t.Errorf("reject: %+v", d)
	}
	next, seq := heldCell(t, dir, "h", seq)
	for _, c := range []struct {
		args map[string]any
		into *deltas
	}{{map[string]any{"session": "h", "cursor": own.Cursor}, &own}, {map[string]any{"cursor": every.Cursor}, &every}} {
		var code strings.Builder
		for !strings.Contains(code.String(), "ignore_errors") { // pieces may come over more than one call
			clitest.CallTool(t, cs, "model_deltas", c.args, c.into)
			if len(c.into.Deltas) == 0 {
				t.Fatalf("model_deltas %v: no piece of the call that wrote %s", c.args, next)
			}
			for _, p := range c.into.Deltas {
				if p.Session != "h" {
					t.Errorf("a piece of session %q", p.Session)
				}
				if p.Delta == "arguments" {
					code.WriteString(p.Text)
				}
			}
			c.args["cursor"] = c.into.Cursor
		}
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "approve", Arguments: map[string]any{"execution_id": "h:" + cell}})
	if err != nil || !res.IsError {
		t.Errorf("approving a cell not held: %v %+v", err, res)
	}
	clitest.CallTool(t, cs, "approve", map[string]any{"execution_id": "h:" + next}, &d)
	if d.Decision != "approved" {
		t.Errorf("approve: %+v", d)
	}
	clitest.FollowUntil(t, dir, "h", seq, func(e client.Event) bool {
		return e.Kind == "turn.end" && clitest.EndReason(t, e) == "waited"
	})
	if bodies := srv.Bodies(); len(bodies) < 4 || !strings.Contains(string(bodies[1]), "allowed") ||
		!strings.Contains(string(bodies[2]), "keep the tree") || !strings.Contains(string(bodies[3]), "removed") {
		t.Errorf("the model did not read the allowed cell's output, the rejection and the approved cell's output")
	}
}
