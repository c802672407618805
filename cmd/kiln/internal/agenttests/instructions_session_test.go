package agenttests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/route/routetest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// anthropicSystem is the system text of an Anthropic request body: its blocks joined.
func anthropicSystem(t *testing.T, body []byte) string {
	t.Helper()
	var req struct {
		System []struct {
			Text string `json:"text"`
		} `json:"system"`
	}
	if err := json.Unmarshal(body, &req, json.RejectUnknownMembers(false)); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	var b strings.Builder
	for _, s := range req.System {
		b.WriteString(s.Text)
	}
	return b.String()
}

// TestASessionHasInstructionsOfItsOwn: a session's own instructions, a text (POST
// /v1/sessions, MCP session_open) or a file (kiln chat --instructions-file, kiln.toml's
// [sessions.NAME]), reach its agent's model in the system text of its requests, and its
// route is its own; both at once, a file that is not there, and other instructions for
// an open session are refused.
func TestASessionHasInstructionsOfItsOwn(t *testing.T) {
	t.Parallel()
	wait := routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="done")`)}
	srv := routetest.New(t, routetest.Anthropic, wait, wait, wait, wait)
	dir := clitest.ShortTemp(t)
	cfg := `[routes.a]
kind = "anthropic"
base_url = "` + srv.URL + `"
model = "claude-test"
context_tokens = 200000

[routes.script]
kind = "script"
script = "replies.jsonl"

[agent]
route = "script"

[sessions.rev]
route = "a"
instructions_file = "rev.md"
`
	for name, text := range map[string]string{"kiln.toml": cfg, "rev.md": "Review the diff; change nothing.\n", "replies.jsonl": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := clitest.StartServe(t, dir)

	s.Call("POST", "/v1/sessions", `{"id":"t","route":"a","instructions":"Answer tersely, session t."}`, 201, nil)
	s.Call("POST", "/v1/sessions/t/inputs", `{"text":"hello"}`, 201, nil)
	clitest.Follow(t, dir, "t", 0, "turn.end")
	if got := anthropicSystem(t, srv.Bodies()[0]); !strings.Contains(got, "Answer tersely, session t.") {
		t.Errorf("the session's instructions are not in its request's system text:\n%s", got)
	}

	cmd := clitest.Command(t, "chat", "rev", "--data", dir)
	cmd.Stdin = strings.NewReader("look at it\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kiln chat rev: %v\n%s", err, out)
	}
	if got := anthropicSystem(t, srv.Bodies()[1]); !strings.Contains(got, "Review the diff; change nothing.") || strings.Contains(got, "session t.") {
		t.Errorf("[sessions.rev]'s instructions file is not its request's system text alone:\n%s", got)
	}
	var info struct {
		Config struct {
			Route            string `json:"route"`
			InstructionsFile string `json:"instructions_file"`
		} `json:"config"`
	}
	s.Call("GET", "/v1/sessions/rev", "", 200, &info)
	if info.Config.Route != "a" || info.Config.InstructionsFile != filepath.Join(dir, "rev.md") {
		t.Errorf("[sessions.rev] as opened: %+v", info.Config)
	}

	file := filepath.Join(t.TempDir(), "mine.md")
	os.WriteFile(file, []byte("Mine alone.\n"), 0o600)
	cmd = clitest.Command(t, "chat", "f", "--data", dir, "--route", "a", "--instructions-file", file)
	cmd.Stdin = strings.NewReader("go\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kiln chat --instructions-file: %v\n%s", err, out)
	}
	if got := anthropicSystem(t, srv.Bodies()[2]); !strings.Contains(got, "Mine alone.") {
		t.Errorf("--instructions-file is not in the request's system text:\n%s", got)
	}
	cmd = clitest.Command(t, "chat", "f", "--data", dir, "--instructions", "something else")
	cmd.Stdin = strings.NewReader("")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "open with other instructions") {
		t.Errorf("other instructions for an open session: %v\n%s", err, out)
	}

	var p struct {
		Detail string `json:"detail"`
	}
	s.Call("POST", "/v1/sessions", `{"id":"both","instructions":"a","instructions_file":"b.md"}`, 400, &p)
	if !strings.Contains(p.Detail, "not both") {
		t.Errorf("both forms: %q", p.Detail)
	}
	s.Call("POST", "/v1/sessions", `{"id":"gone","instructions_file":"gone.md"}`, 400, &p)
	if !strings.Contains(p.Detail, "gone.md") {
		t.Errorf("a missing file: %q", p.Detail)
	}
	s.Call("POST", "/v1/sessions", "{\"id\":\"bad\",\"instructions\":\"caf\xe9\"}", 400, nil)
	at := strings.Repeat("x", 1<<20)
	s.Call("POST", "/v1/sessions", `{"id":"big","instructions":"`+at+`x"}`, 400, &p)
	if !strings.Contains(p.Detail, "over") {
		t.Errorf("a text past 1 MiB: %q", p.Detail)
	}
	s.Call("POST", "/v1/sessions", `{"id":"atbound","instructions":"`+at+`"}`, 201, nil)

	mcmd := clitest.Command(t, "mcp", "--data", dir, "--workspace", t.TempDir())
	cs, err := clitest.NewMCPClient(new(atomic.Int64)).Connect(context.Background(), &mcp.CommandTransport{Command: mcmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	clitest.CallTool(t, cs, "session_open", map[string]any{"session": "m", "route": "a", "instructions": "Through MCP."}, nil)
	s.Call("POST", "/v1/sessions/m/inputs", `{"text":"hi"}`, 201, nil)
	clitest.Follow(t, dir, "m", 0, "turn.end")
	if got := anthropicSystem(t, srv.Bodies()[3]); !strings.Contains(got, "Through MCP.") {
		t.Errorf("session_open's instructions are not in the request's system text:\n%s", got)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_open",
		Arguments: map[string]any{"session": "m", "instructions": "Other."}})
	if err != nil || !res.IsError {
		t.Errorf("session_open of an open session with other instructions: %v %v", res, err)
	}
}
