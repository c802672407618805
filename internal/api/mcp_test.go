package api_test

import (
	"net/http"
	"strings"
	"testing"

	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/tools/mcptest"
)

// TestSessionWithMCPServers creates sessions naming MCP servers: one reached over
// streamable HTTP, whose tools the session's cells call, and one whose command cannot
// start, which is refused naming it.
func TestSessionWithMCPServers(t *testing.T) {
	server := mcptest.HTTP(t) // before the daemon: it ends after the daemon's client
	d := startDaemon(t, kilndaemon.Options{})
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "m",
		"mcp": []map[string]any{{"name": "demo", "url": server}}, "limits": map[string]any{"tool_timeout_ms": 200}})
	d.want(resp, data, http.StatusCreated, nil)
	if _, rec := d.execute("m", "await tools.demo.add(a=2, b=3)", 20000); rec.Status != "ok" || result(rec) != "{'sum': 5}" {
		t.Fatalf("a tool call: %+v", rec)
	}
	if _, rec := d.execute("m", "await tools.demo.hang()", 20000); rec.Status != "error" || rec.Error == nil || !strings.Contains(*rec.Error, "tool_timeout") {
		t.Fatalf("a call past the session's tool timeout: %+v", rec)
	}

	resp, data = d.do("POST", "/v1/sessions", map[string]any{"id": "n",
		"mcp": []map[string]any{{"name": "gone", "command": []string{"/nonexistent/mcp-server"}}}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), "gone") {
		t.Fatalf("a server that cannot start: %d %s", resp.StatusCode, data)
	}
	wantCode(t, data, api.CodeInvalid)
	resp, data = d.do("GET", "/v1/sessions/n", nil)
	d.want(resp, data, http.StatusNotFound, nil)
}
