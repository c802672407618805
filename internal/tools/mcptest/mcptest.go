// Package mcptest is an MCP server for tests of kiln's MCP client, built with the MCP Go
// SDK: served on stdio by a test binary that re-executes itself, or over streamable HTTP
// on loopback.
//
// Its tools: echo {text} answers the text; add {a, b} answers {"sum": a+b} as structured
// content; fail answers a tool error "it failed"; hang waits until the call is cancelled;
// huge answers a text of the given size in bytes; exit ends the server's process with
// status 3.
package mcptest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Env is the environment variable that makes Main serve: "stdio" serves on stdin and
// stdout; "fail" writes "mcptest: cannot start" to stderr and exits 1; "endless" is a
// hostile server that answers every tools/list with no tools and one more page.
const Env = "KILN_MCPTEST"

// Server is a new server with the test tools.
func Server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	type text struct {
		Text string `json:"text" jsonschema:"the text to answer"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Answer the text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in text) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	type pair struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	type sum struct {
		Sum int `json:"sum"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two integers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in pair) (*mcp.CallToolResult, sum, error) {
			return nil, sum{in.A + in.B}, nil
		})
	type none struct{}
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Fail."},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("it failed")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "Wait until cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	type size struct {
		Bytes int `json:"bytes"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "huge", Description: "Answer a text of the given size."},
		func(_ context.Context, _ *mcp.CallToolRequest, in size) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "exit", Description: "End the server's process."},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	return s
}

// Main serves as Env says, and exits; without Env it returns at once.
func Main() {
	switch os.Getenv(Env) {
	case "":
		return
	case "fail":
		os.Stderr.WriteString("mcptest: cannot start\n")
		os.Exit(1)
	case "endless":
		endless()
	}
	ServeStdio()
}

// endless answers initialize, then every tools/list with an empty page and a cursor,
// until stdin ends; then it exits.
func endless() {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || req.ID == nil {
			continue // a notification
		}
		var result string
		switch req.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"endless","version":"1"}}`
		case "tools/list":
			result = `{"tools":[],"nextCursor":"more"}`
		default:
			result = `{}`
		}
		fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", req.ID, result)
	}
	os.Exit(0)
}

// ServeStdio serves Server on stdin and stdout until stdin ends, and exits.
func ServeStdio() {
	if err := Server().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Print(err)
	}
	os.Exit(0)
}

// HTTP serves Server over streamable HTTP on loopback until the test ends, and returns
// its endpoint.
func HTTP(t testing.TB) string {
	s := Server()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
