package servetests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/bombtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpLimited is what these tests read of session_open's and execute's answers.
type mcpLimited struct {
	Status  string `json:"status"`
	Limit   string `json:"limit"`
	Sandbox *struct {
		Profile   string `json:"profile"`
		Processes int    `json:"max_processes"`
		Memory    int64  `json:"memory_bytes"`
	} `json:"sandbox"`
}

// TestMCPSessionLimits opens sessions through kiln mcp's session_open, each with one
// limit, and runs a cell past it: each is stopped and its answer names the limit. The
// process's --sandbox confines a session that gives none; session_open's sandbox
// confines its own; a limit that cannot be applied, and other settings for a session
// open, are refused.
func TestMCPSessionLimits(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	var progress atomic.Int64
	cs, err := clitest.NewMCPClient(&progress).Connect(context.Background(),
		&mcp.CommandTransport{Command: clitest.Command(t, "mcp", "--data", dir, "--workspace", t.TempDir(), "--sandbox", "workspace")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, c := range []struct {
		session string
		open    map[string]any
		code    string
		status  string
		limit   string
		profile string
	}{
		{"memory", map[string]any{"limits": map[string]any{"memory_bytes": 256 << 20}}, bombtest.Memory, "error", "memory", "workspace"},
		{"cpu", map[string]any{"sandbox": "none", "limits": map[string]any{"cpu_seconds": 1}}, bombtest.Busy, "error", "cpu_seconds", "none"},
		{"wall", map[string]any{"sandbox": "none", "limits": map[string]any{"wall_ms": 500}}, bombtest.Sleep, "interrupted", "timeout", "none"},
		{"pids", map[string]any{"limits": map[string]any{"max_processes": 32}}, bombtest.Fork(40), "error", "max_processes", "workspace"},
	} {
		t.Run(c.session, func(t *testing.T) {
			c.open["session"] = c.session
			var opened mcpLimited
			clitest.CallTool(t, cs, "session_open", c.open, &opened)
			if opened.Sandbox == nil || opened.Sandbox.Profile != c.profile {
				t.Errorf("session_open's sandbox: %+v; want profile %s", opened.Sandbox, c.profile)
			}
			var x mcpLimited
			clitest.CallTool(t, cs, "execute", map[string]any{"session": c.session, "code": c.code, "wait_ms": 50000}, &x)
			if x.Status != c.status || x.Limit != c.limit {
				t.Errorf("the bomb: %+v; want %s, limit %s", x, c.status, c.limit)
			}
		})
	}
	for _, c := range []struct {
		name string
		open map[string]any
		says string
	}{
		{"processes unconfined", map[string]any{"session": "x", "sandbox": "none", "limits": map[string]any{"max_processes": 32}}, "needs a confining sandbox"},
		{"memory below its bound", map[string]any{"session": "x", "limits": map[string]any{"memory_bytes": 1}}, "limits.memory_bytes"},
		{"an unknown profile", map[string]any{"session": "x", "sandbox": "jail"}, "sandbox"},
		{"other limits for a session open", map[string]any{"session": "memory", "limits": map[string]any{"memory_bytes": 512 << 20}}, "limits.memory_bytes"},
		{"another profile for a session open", map[string]any{"session": "memory", "sandbox": "strict"}, `sandbox "workspace", not "strict"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_open", Arguments: c.open})
			if err == nil && !res.IsError {
				t.Fatalf("session_open %v: %+v; want it refused", c.open, res.StructuredContent)
			}
			msg := ""
			if err != nil {
				msg = err.Error()
			} else {
				msg = res.Content[0].(*mcp.TextContent).Text
			}
			if !strings.Contains(msg, c.says) {
				t.Errorf("session_open %v: %q; want it to name %q", c.open, msg, c.says)
			}
		})
	}
}

// TestMCPRefusesItsOwnSandboxThroughADaemon checks that kiln mcp's --sandbox, which
// the daemon's sessions would not take, is refused while a daemon serves the data
// directory, and that one kiln does not know is refused anyway.
func TestMCPRefusesItsOwnSandboxThroughADaemon(t *testing.T) {
	dir := clitest.ShortTemp(t)
	out, err := clitest.Command(t, "mcp", "--data", dir, "--sandbox", "jail").CombinedOutput()
	if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(string(out), `unknown profile: "jail"`) {
		t.Errorf("kiln mcp --sandbox jail: %v %s; want it refused", err, out)
	}
	clitest.StartServe(t, dir)
	out, err = clitest.Command(t, "mcp", "--data", dir, "--sandbox", "workspace").CombinedOutput()
	if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(string(out), "its sessions are confined as the daemon's") {
		t.Errorf("kiln mcp --sandbox through a daemon: %v %s; want it refused", err, out)
	}
}

// TestMCPTakesKilnTomlSessions: kiln mcp with no daemon confines and bounds a session
// named in kiln.toml's [sessions.NAME] as that section says, as a daemon would, and
// another session as [sandbox] and [limits] say.
func TestMCPTakesKilnTomlSessions(t *testing.T) {
	dir := clitest.ShortTemp(t)
	toml := "[limits]\nmax_processes = 48\n[sessions.bounded]\nsandbox = \"workspace:best-effort\"\n" +
		"limits = { max_processes = 32, memory_bytes = 268435456 }\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := clitest.ConnectMCP(t, dir, new(atomic.Int64))
	for _, c := range []struct {
		session   string
		processes int
		memory    int64
	}{
		{"bounded", 32, 256 << 20},
		{"other", 48, 0},
	} {
		var opened mcpLimited
		clitest.CallTool(t, cs, "session_open", map[string]any{"session": c.session}, &opened)
		if s := opened.Sandbox; s == nil || s.Profile != "workspace:best-effort" && s.Profile != "workspace" ||
			s.Processes != c.processes || s.Memory != c.memory {
			t.Errorf("session %s opened with sandbox %+v; want workspace, %d processes, %d bytes", c.session, s, c.processes, c.memory)
		}
	}
}
