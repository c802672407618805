package mcpserver_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/daemon"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect serves kiln's MCP server in the test's process, on pipes, with sessions of
// its own over a fresh data directory, in workspace (a fresh one when ""), and returns
// a go-sdk client's session of it.
func connect(t *testing.T, workspace string) *mcp.ClientSession {
	t.Helper()
	dir, err := os.MkdirTemp("", "km") // short enough for a Unix socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		logger := slog.New(slog.NewTextHandler(failOnWrite{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		done <- daemon.ServeMCP(ctx, daemon.Options{DataDir: dir, Workspace: cmp.Or(workspace, t.TempDir()), Logger: logger}, toServer, fromServer)
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		cs.Close() // the server's input ends, and so does it
		if err := <-done; err != nil {
			t.Errorf("ServeMCP: %v", err)
		}
	})
	return cs
}

// failOnWrite fails the test at each line logged to it.
type failOnWrite struct{ t *testing.T }

func (f failOnWrite) Write(p []byte) (int, error) {
	f.t.Errorf("logged: %s", p)
	return len(p), nil
}

// onePixel is a valid 1x1 PNG.
func onePixel(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// displayed is what the test reads of a tool's structured answer.
type displayed struct {
	ExecutionID string `json:"execution_id"`
	Status      string `json:"status"`
	Record      string `json:"record"`
	Displays    []struct {
		Index     int    `json:"index"`
		Link      string `json:"link"`
		MIMEType  string `json:"mime_type"`
		TextPlain string `json:"text_plain"`
	} `json:"displays"`
}

func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, v any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %v", tool, err, res)
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

// TestImageIsAResourceLink displays an object whose _repr_png_ is a real PNG: execute
// answers a link to it, never its base64, and reading the link gives the same bytes.
func TestImageIsAResourceLink(t *testing.T) {
	if _, err := os.Stat("/usr/bin/env"); err != nil {
		t.Skip(err)
	}
	cs := connect(t, "")
	want := onePixel(t)
	b64 := base64.StdEncoding.EncodeToString(want)
	code := "import base64\nclass Dot:\n    def _repr_png_(self): return base64.b64decode('" + b64 + "')\n" +
		"    def __repr__(self): return 'a red dot'\ndisplay(Dot())\ndisplay('just text')\n1"
	callTool(t, cs, "session_open", map[string]any{"session": "img"}, nil)
	var x displayed
	res := callTool(t, cs, "execute", map[string]any{"session": "img", "code": code}, &x)
	if x.Status != "ok" || len(x.Displays) != 2 {
		t.Fatalf("execute: %+v", x)
	}
	link := "kiln://sessions/img/executions/c-1/display/0"
	if d := x.Displays[0]; d.Link != link || d.MIMEType != "image/png" || d.TextPlain != "a red dot" {
		t.Errorf("display 0: %+v", d)
	}
	if d := x.Displays[1]; d.MIMEType != "text/plain" || d.TextPlain != "'just text'" {
		t.Errorf("display 1: %+v", d)
	}
	var links []*mcp.ResourceLink
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.ResourceLink:
			links = append(links, c)
		case *mcp.TextContent:
			if !strings.Contains(c.Text, link) || !strings.Contains(c.Text, "a red dot") {
				t.Errorf("the text copy does not name the display: %q", c.Text)
			}
		default:
			t.Errorf("content %T", c)
		}
	}
	if len(links) != 2 || links[0].URI != link || links[0].MIMEType != "image/png" {
		t.Fatalf("links: %v", links)
	}
	// No answer carries the image inline: not execute's, not record's.
	var rec map[string]any
	recRes := callTool(t, cs, "record", map[string]any{"execution_id": x.ExecutionID}, &rec)
	for _, r := range []*mcp.CallToolResult{res, recRes} {
		data, _ := json.Marshal(r)
		if bytes.Contains(data, []byte(b64)) {
			t.Errorf("an answer carries the image's base64: %s", data)
		}
	}
	if data, _ := json.Marshal(rec); !bytes.Contains(data, []byte(link)) {
		t.Errorf("the record does not link the display: %s", data)
	}

	got, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: link})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Contents) != 1 || got.Contents[0].MIMEType != "image/png" || !bytes.Equal(got.Contents[0].Blob, want) {
		t.Fatalf("read %s: %+v", link, got.Contents)
	}
	if _, err := png.Decode(bytes.NewReader(got.Contents[0].Blob)); err != nil {
		t.Errorf("not a PNG: %v", err)
	}
	text, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: x.Displays[1].Link})
	if err != nil || text.Contents[0].Text != "'just text'" || text.Contents[0].MIMEType != "text/plain" {
		t.Errorf("read %s: %v %+v", x.Displays[1].Link, err, text)
	}

	for uri, why := range map[string]string{
		"kiln://sessions/img/executions/c-1/display/2":  "has 2, not one numbered 2",
		"kiln://sessions/img/executions/c-1/display/-1": "not a display item's number",
		"kiln://sessions/img/executions/c-1/display/01": "not a display item's number",
		"kiln://sessions/img/executions/c-9/display/0":  "no such execution",
		"kiln://sessions/nope/executions/c-1/display/0": "no such session",
	} {
		_, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != mcp.CodeResourceNotFound || !strings.Contains(rpc.Message, why) {
			t.Errorf("read %s: %v, want resource not found: %s", uri, err, why)
		}
	}
}
