package agenttests

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// TestOperatorFoldsAndResetsASession: kiln sessions fold replaces the agent's
// conversation by a summary, which the next turn's request carries instead of it;
// kiln sessions reset drops both, and an empty conversation is refused
// nothing_to_fold; the reset holds across a daemon restart, and the record keeps every
// turn.
func TestOperatorFoldsAndResetsASession(t *testing.T) {
	srv := routetest.New(t, routetest.Anthropic,
		routetest.Step{Code: routetest.Code(`print("first " + "cell")`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="one")`)},
		routetest.Step{Text: "SUMMARY: printed the first cell."},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="two")`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="three")`)})
	dir := agentDataDir(t, srv, "")
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"f"}`, 201, nil)
	var p struct {
		Code string `json:"code"`
	}
	s.Call("POST", "/v1/sessions/f/fold", "", 409, &p)
	if p.Code != "nothing_to_fold" {
		t.Errorf("a fold before any turn: %q", p.Code)
	}
	waited := func(after int64) int64 {
		return clitest.FollowUntil(t, dir, "f", after, func(e client.Event) bool {
			return e.Kind == "turn.end" && clitest.EndReason(t, e) == "waited"
		}).Seq
	}
	s.Call("POST", "/v1/sessions/f/inputs", `{"text":"go"}`, 201, nil)
	seq := waited(0)

	var f client.Fold
	if err := json.Unmarshal([]byte(clitest.Out(t, "sessions", "fold", "f", "--json", "--data", dir)), &f); err != nil {
		t.Fatal(err)
	}
	if f.Summary != "SUMMARY: printed the first cell." || f.Covers == 0 || f.Reset || f.Turn != 1 {
		t.Errorf("the fold: %+v", f)
	}
	clitest.FollowUntil(t, dir, "f", seq, func(e client.Event) bool { // numbered after the turn's two calls
		return e.Kind == "model_call" && strings.Contains(string(e.Raw), `"purpose":"fold"`) && strings.Contains(string(e.Raw), `"seq":3`)
	})
	e := clitest.FollowUntil(t, dir, "f", seq, func(e client.Event) bool { return e.Kind == "fold" })
	if !strings.Contains(string(e.Raw), `"operator":true`) {
		t.Errorf("the fold's record: %s", e.Raw)
	}
	s.Call("POST", "/v1/sessions/f/inputs", `{"text":"NEXT-INPUT"}`, 201, nil)
	seq = waited(e.Seq)
	bodies := srv.Bodies()
	if last := string(bodies[len(bodies)-1]); !strings.Contains(last, "SUMMARY: printed the first cell.") ||
		strings.Contains(last, `first \" + \"cell`) || !strings.Contains(last, "NEXT-INPUT") {
		t.Errorf("the request after the fold: %s", last)
	}

	if out := clitest.Out(t, "sessions", "reset", "f", "--data", dir); !strings.HasPrefix(out, "reset: ") {
		t.Errorf("kiln sessions reset: %q", out)
	}
	out, err := clitest.Command(t, "sessions", "fold", "f", "--json", "--data", dir).Output()
	if err == nil || !strings.Contains(string(out), "nothing_to_fold") {
		t.Errorf("a fold right after a reset: %v %s", err, out)
	}
	s.Kill(clitest.WaitForChild(t, s.Cmd.Process.Pid))
	s = clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions/f/inputs", `{"text":"again"}`, 201, nil)
	waited(seq)
	bodies = srv.Bodies()
	if last := string(bodies[len(bodies)-1]); strings.Contains(last, "SUMMARY") || strings.Contains(last, "NEXT-INPUT") ||
		!strings.Contains(last, "again") {
		t.Errorf("the request after the reset and a restart: %s", last)
	}
	type foldFlags struct {
		Operator bool `json:"operator"`
		Reset    bool `json:"reset"`
	}
	var folds []foldFlags
	lines := strings.Split(strings.TrimSpace(clitest.Out(t, "turns", "f", "--json", "--data", dir)), "\n")
	for _, line := range lines {
		var turn struct {
			Folds []foldFlags `json:"folds"`
		}
		if err := json.Unmarshal([]byte(line), &turn, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		folds = append(folds, turn.Folds...)
	}
	if len(lines) != 3 || len(folds) != 2 || !folds[0].Operator || folds[0].Reset || !folds[1].Reset {
		t.Errorf("the record: %d turns, folds %+v", len(lines), folds)
	}
}
