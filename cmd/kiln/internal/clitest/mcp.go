package clitest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DotPNG is a 1x1 PNG, base64.
const DotPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

// CallTool calls tool with args and decodes its structured answer into v.
func CallTool(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any, v any) *mcp.CallToolResult {
	t.Helper()
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	params.SetProgressToken("p-" + tool)
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s answered an error: %v", tool, res.Content)
	}
	data, err := json.Marshal(res.StructuredContent)
	if err == nil && v != nil {
		err = json.Unmarshal(data, v, json.RejectUnknownMembers(false))
	}
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// NewMCPClient is an MCP client that counts the progress notifications it receives in
// progress.
func NewMCPClient(progress *atomic.Int64) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) }})
}

// ConnectMCP starts kiln mcp on the data directory dir, with a workspace of its own,
// and connects to it; the session ends with the test.
func ConnectMCP(t testing.TB, dir string, progress *atomic.Int64) *mcp.ClientSession {
	t.Helper()
	// CommandTransport holds the server's stdin open until Close (go-sdk#1061).
	cs, err := NewMCPClient(progress).Connect(context.Background(),
		&mcp.CommandTransport{Command: Command(t, "mcp", "--data", dir, "--workspace", t.TempDir())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
