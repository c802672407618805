package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestMCPClientsThatLeaveWithoutClosingLockNoOneOut connects the official TypeScript SDK's
// client to a daemon's /mcp and closes it 300 times, past the bound on sessions: its
// close() sends no DELETE, so each session is left idle, and the daemon reclaims the one
// idle longest for the next; a new client then works.
func TestMCPClientsThatLeaveWithoutClosingLockNoOneOut(t *testing.T) {
	modules := os.Getenv("KILN_MCP_TS_SDK")
	if modules == "" {
		t.Skip("KILN_MCP_TS_SDK does not name a node_modules with @modelcontextprotocol/sdk")
	}
	script, err := filepath.Abs("testdata/mcp_ts_cycles.mjs")
	if err != nil {
		t.Fatal(err)
	}
	dir := clitest.ShortTemp(t)
	serve := clitest.Command(t, "serve", "--data", dir, "--workspace", t.TempDir(), "--listen", "127.0.0.1:0", "--json")
	out, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	})
	var ready struct {
		Listen string `json:"listen"`
	}
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &ready) != nil || ready.Listen == "" {
		t.Fatalf("kiln serve --json: %q, %v", line, err)
	}
	token := strings.TrimSpace(clitest.Out(t, "serve", "--data", dir, "--print-token"))
	cmd := exec.Command("node", script, modules, "http://"+ready.Listen+"/mcp", token, "300")
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, got)
	}
	t.Logf("%s", got)
}
