package agenttests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestASessionRunsOnItsOwnRoute: a session opened on a route of its own (kiln chat
// --route, POST /v1/sessions with route) runs its agent there, the daemon's [agent]
// route serving the others; a route kiln.toml lacks is refused, naming it, and so is
// another route for a session open on one.
func TestASessionRunsOnItsOwnRoute(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, clitest.CodeReply(`await runtime.request("local.send", text="from the agent route")`), clitest.CodeReply(`await runtime.wait(None, reason="done")`))
	cfg := "[routes.other]\nkind = \"script\"\nscript = \"other.jsonl\"\n\n"
	other := clitest.CodeReply(`await runtime.request("local.send", text="from the other route")`) + "\n" + clitest.CodeReply(`await runtime.wait(None, reason="done")`) + "\n"
	toml, err := os.ReadFile(filepath.Join(dir, "kiln.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), append([]byte(cfg), toml...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.jsonl"), []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	s := clitest.StartServe(t, dir)

	cmd := clitest.Command(t, "chat", "o", "--data", dir, "--route", "other")
	cmd.Stdin = strings.NewReader("say hello\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "agent: from the other route") {
		t.Fatalf("chat --route other: %v\n%s", err, out)
	}
	var info struct {
		Config struct {
			Route string `json:"route"`
		} `json:"config"`
	}
	s.Call("GET", "/v1/sessions/o", "", 200, &info)
	if info.Config.Route != "other" {
		t.Errorf("the session's route is %q", info.Config.Route)
	}

	s.Call("POST", "/v1/sessions", `{"id":"d"}`, 201, nil)
	s.Call("POST", "/v1/sessions/d/inputs", `{"text":"say hello"}`, 201, nil)
	got := clitest.Follow(t, dir, "d", 0, "turn.end")
	said := false
	for _, e := range got {
		said = said || strings.Contains(string(e.Raw), "from the agent route")
	}
	if !said {
		t.Error("the session without a route of its own did not run on the [agent] route")
	}

	var p struct {
		Detail string `json:"detail"`
	}
	s.Call("POST", "/v1/sessions", `{"id":"n","route":"nope"}`, 400, &p)
	if !strings.Contains(p.Detail, `"nope"`) {
		t.Errorf("an unknown route's problem: %q", p.Detail)
	}
	cmd = clitest.Command(t, "chat", "o", "--data", dir, "--route", "test")
	cmd.Stdin = strings.NewReader("")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), `open on route "other"`) {
		t.Errorf("chat --route test on a session open on other: %v\n%s", err, out)
	}
}
