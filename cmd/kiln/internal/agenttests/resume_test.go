package agenttests

import (
	"strings"
	"testing"

	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// TestATurnThatDiedIsResumed: a turn the daemon's death ended (host_died) is resumed by
// kiln turns resume: an input naming it and its inputs wakes the agent, whose next turn
// carries on and ends; a last turn that ended otherwise is not resumed.
func TestATurnThatDiedIsResumed(t *testing.T) {
	t.Parallel()
	srv := routetest.New(t, routetest.Anthropic, routetest.Step{Hold: true},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="done")`)})
	dir := clitest.ShortTemp(t)
	clitest.WriteConfig(t, dir, "[routes.a]\nkind = \"anthropic\"\nbase_url = \""+srv.URL+"\"\nmodel = \"claude-test\"\ncontext_tokens = 200000\n\n[agent]\nroute = \"a\"\n")
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"r"}`, 201, nil)
	worker := clitest.WaitForChild(t, s.Cmd.Process.Pid)
	s.Call("POST", "/v1/sessions/r/inputs", `{"text":"build it"}`, 201, nil)
	<-srv.Arrived // the first call holds
	s.Kill(worker)

	s = clitest.StartServe(t, dir)
	var p struct {
		Code string `json:"code"`
	}
	out := clitest.Out(t, "turns", "resume", "r", "--data", dir)
	if strings.TrimSpace(out) == "" || !strings.HasPrefix(out, "resuming turn 1 (input event:") {
		t.Fatalf("kiln turns resume: %q", out)
	}
	clitest.FollowUntil(t, dir, "r", 0, func(e client.Event) bool {
		return e.Kind == "turn.end" && strings.Contains(string(e.Raw), `"waited"`)
	})
	bodies := srv.Bodies()
	if last := string(bodies[len(bodies)-1]); !strings.Contains(last, "The operator resumes turn 1, which ended host_died") ||
		!strings.Contains(last, "turn 1 ended host_died") {
		t.Errorf("the resumed turn's request lacks the resume or the died marker:\n%.2000s", last)
	}
	s.Call("POST", "/v1/sessions/r/turn:resume", "", 409, &p)
	if p.Code != "not_resumable" {
		t.Errorf("resuming a turn that waited: %q", p.Code)
	}
}
