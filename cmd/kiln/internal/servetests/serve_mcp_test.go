package servetests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// childRunning is the pid of a child of parent whose argv[0] is argv0, or 0.
func childRunning(parent int, argv0 string) int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(parent) + "/task/*/children")
	for _, f := range tasks {
		data, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(data)) {
			cmdline, _ := os.ReadFile("/proc/" + field + "/cmdline")
			if first, _, _ := strings.Cut(string(cmdline), "\x00"); first == argv0 {
				pid, _ := strconv.Atoi(field)
				return pid
			}
		}
	}
	return 0
}

// TestDaemonSessionCallsMCPTools opens a daemon's session with --mcp: the daemon starts
// the server, the session's cells call its tools in later calls too, naming other
// servers for the open session is refused saying what to do, and the server ends with
// the session.
func TestDaemonSessionCallsMCPTools(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	bin := clitest.MCPServer(t)
	out := clitest.Out(t, "exec", "--data", dir, "--session", "t", "--mcp", "demo="+bin, "await tools.demo.add(a=2, b=3)")
	if strings.TrimSpace(out) != "{'sum': 5}" {
		t.Fatalf("a tool call in the daemon's session: %q", out)
	}
	server := childRunning(s.Cmd.Process.Pid, bin)
	if server == 0 {
		t.Fatal("the daemon runs no MCP server")
	}
	if out := clitest.Out(t, "exec", "--data", dir, "--session", "t", `await tools.demo.echo(text="again")`); strings.TrimSpace(out) != "'again'" {
		t.Fatalf("the session's tools in a later call: %q", out)
	}

	other := clitest.Command(t, "exec", "--data", dir, "--session", "t", "--mcp", "other="+bin, "1")
	var stderr strings.Builder
	other.Stderr = &stderr
	if err := other.Run(); err == nil || !strings.Contains(stderr.String(), "session t is open with [demo]; stop it first (kiln sessions stop t)") {
		t.Fatalf("other servers for the open session: %v, %s", err, stderr.String())
	}

	s.Call("DELETE", "/v1/sessions/t", "", 200, nil)
	if clitest.ProcessExists(server) {
		t.Fatalf("MCP server %d outlived its session", server)
	}
}
