package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/poll"
)

// mcpExecution is what these tests read of a tool's structured answer.
type mcpExecution struct {
	ExecutionID    string `json:"execution_id"`
	Status         string `json:"status"`
	ValueRepr      string `json:"value_repr"`
	StdoutTail     string `json:"stdout_tail"`
	TruncatedBytes int64  `json:"truncated_bytes"`
	NamespaceLost  bool   `json:"namespace_lost"`
	Record         string `json:"record"`
	Displays       []struct {
		Link     string `json:"link"`
		MIMEType string `json:"mime_type"`
	} `json:"displays"`
}

// exerciseMCP drives a kiln MCP server the way an agent client does.
func exerciseMCP(t *testing.T, cs *mcp.ClientSession, progress *atomic.Int64) {
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if (tool.Name == "wait" || tool.Name == "record") && (tool.Annotations == nil || !tool.Annotations.ReadOnlyHint) {
			t.Errorf("%s is not marked read-only", tool.Name)
		}
	}
	for _, want := range []string{"session_open", "session_list", "session_close", "execute", "wait", "interrupt", "record", "run_program"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("no tool %s among %v", want, names)
		}
	}
	clitest.CallTool(t, cs, "session_open", map[string]any{"session": "m"}, nil)
	var x mcpExecution
	res := clitest.CallTool(t, cs, "execute", map[string]any{"session": "m", "code": "x = 2\nprint('hi')\nx * 21"}, &x)
	if x.Status != "ok" || x.ValueRepr != "42" || x.StdoutTail != "hi\n" {
		t.Fatalf("execute: %+v", x)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(text.Text, "42") {
		t.Errorf("no text copy: %v", res.Content)
	}
	// A long cell answers running with its id, then wait finishes it.
	clitest.CallTool(t, cs, "execute", map[string]any{"session": "m", "code": "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.6)\n'done'", "wait_ms": 100}, &x)
	if x.Status != "running" || x.ExecutionID == "" {
		t.Fatalf("a long cell: %+v", x)
	}
	before := progress.Load()
	clitest.CallTool(t, cs, "wait", map[string]any{"execution_id": x.ExecutionID, "wait_ms": 30000}, &x)
	if x.Status != "ok" || x.ValueRepr != "'done'" {
		t.Fatalf("wait: %+v", x)
	}
	if progress.Load() == before {
		t.Error("no progress notification while the cell ran")
	}
	// Interrupt.
	clitest.CallTool(t, cs, "execute", map[string]any{"session": "m", "code": "while True: time.sleep(0.01)", "wait_ms": 0}, &x)
	clitest.CallTool(t, cs, "interrupt", map[string]any{"execution_id": x.ExecutionID}, &x)
	if x.Status != "interrupted" || x.NamespaceLost {
		t.Fatalf("interrupt: %+v", x)
	}
	// Output past the answer's bound is counted, and the record is a resource link.
	res = clitest.CallTool(t, cs, "execute", map[string]any{"session": "m", "code": "print('y' * 20000)"}, &x)
	if x.TruncatedBytes == 0 || len(x.StdoutTail) > 8192 {
		t.Fatalf("bounded output: %d bytes, %d truncated", len(x.StdoutTail), x.TruncatedBytes)
	}
	var link *mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	if link == nil || link.URI != x.Record {
		t.Fatalf("no resource link to %s: %v", x.Record, res.Content)
	}
	read, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || len(read.Contents) != 1 || !strings.Contains(read.Contents[0].Text, strings.Repeat("y", 20000)) {
		t.Fatalf("reading %s: %v", link.URI, err)
	}
	// An image a cell displays is a resource link; reading it gives its bytes.
	res = clitest.CallTool(t, cs, "execute", map[string]any{"session": "m", "code": "import base64\nclass Dot:\n" +
		"    def _repr_png_(self): return base64.b64decode('" + clitest.DotPNG + "')\ndisplay(Dot())"}, &x)
	if len(x.Displays) != 1 || x.Displays[0].MIMEType != "image/png" {
		t.Fatalf("a displayed image: %+v", x)
	}
	if l, ok := res.Content[len(res.Content)-1].(*mcp.ResourceLink); !ok || l.URI != x.Displays[0].Link {
		t.Fatalf("no resource link to the image: %v", res.Content)
	}
	read, err = cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: x.Displays[0].Link})
	if want, _ := base64.StdEncoding.DecodeString(clitest.DotPNG); err != nil || len(read.Contents) != 1 || !bytes.Equal(read.Contents[0].Blob, want) {
		t.Fatalf("reading %s: %v %+v", x.Displays[0].Link, err, read)
	}
	// A bad call is a tool error, not a protocol one.
	bad, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"execution_id": "m:c-999"}})
	if err != nil || !bad.IsError {
		t.Fatalf("an unknown execution: %v %v", bad, err)
	}
	var prog struct {
		Result struct {
			Status string `json:"status"`
			Value  any    `json:"value"`
		} `json:"result"`
	}
	clitest.CallTool(t, cs, "run_program", map[string]any{"code": "return 6 * 7"}, &prog)
	if prog.Result.Status != "ok" || prog.Result.Value != float64(42) {
		t.Fatalf("run_program: %+v", prog)
	}
	clitest.CallTool(t, cs, "session_close", map[string]any{"session": "m"}, nil)
}

func TestMCPOverStdio(t *testing.T) {
	t.Parallel()
	var progress atomic.Int64
	exerciseMCP(t, clitest.ConnectMCP(t, clitest.ShortTemp(t), &progress), &progress)
}

func TestMCPThroughTheDaemon(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	clitest.StartServe(t, dir)
	t.Run("streamable HTTP", func(t *testing.T) {
		var progress atomic.Int64
		unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", dir+"/kiln.sock")
		}}}
		defer unix.CloseIdleConnections()
		cs, err := clitest.NewMCPClient(&progress).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: "http://kiln/mcp", HTTPClient: unix}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		exerciseMCP(t, cs, &progress)
	})
	t.Run("kiln mcp attached", func(t *testing.T) {
		var progress atomic.Int64
		cs, err := clitest.NewMCPClient(&progress).Connect(context.Background(),
			&mcp.CommandTransport{Command: clitest.Command(t, "mcp", "--data", dir)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		exerciseMCP(t, cs, &progress)
	})
}

// TestMCPWithTheTypeScriptSDK drives kiln mcp with the official TypeScript SDK's client,
// from the node_modules that KILN_MCP_TS_SDK names (.ci/run installs it).
func TestMCPWithTheTypeScriptSDK(t *testing.T) {
	modules := os.Getenv("KILN_MCP_TS_SDK")
	if modules == "" {
		t.Skip("KILN_MCP_TS_SDK does not name a node_modules with @modelcontextprotocol/sdk")
	}
	script, err := filepath.Abs("testdata/mcp_ts_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	kiln := clitest.Command(t).Path
	cmd := exec.Command("node", script, modules, kiln, clitest.ShortTemp(t), t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestTwoMCPProcessesOnOneDataDirectory starts two kiln mcp on one data directory with
// no daemon, as two MCP hosts do: each serves sessions of its own and says so on stderr;
// a session one holds is refused to the other; then, with a daemon, a third attaches.
func TestTwoMCPProcessesOnOneDataDirectory(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	connect := func(stderr *syncBuffer) *mcp.ClientSession {
		t.Helper()
		cmd := clitest.Command(t, "mcp", "--data", dir, "--workspace", t.TempDir())
		cmd.Stderr = stderr
		var progress atomic.Int64
		cs, err := clitest.NewMCPClient(&progress).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("kiln mcp: %v\n%s", err, stderr)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	var errs [3]syncBuffer
	one, two := connect(&errs[0]), connect(&errs[1])
	var x mcpExecution
	for i, cs := range []*mcp.ClientSession{one, two} {
		session := "own" + strconv.Itoa(i)
		clitest.CallTool(t, cs, "session_open", map[string]any{"session": session}, nil)
		clitest.CallTool(t, cs, "execute", map[string]any{"session": session, "code": "6 * 7"}, &x)
		if x.Status != "ok" || x.ValueRepr != "42" || x.ExecutionID != session+":c-1" {
			t.Fatalf("kiln mcp %d: %+v", i, x)
		}
		errs[i].waitFor(t, "kiln mcp: data directory "+dir+"; no daemon serves it")
	}
	res, err := two.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_open", Arguments: map[string]any{"session": "own0"}})
	if err != nil || !res.IsError {
		t.Fatalf("a session the other kiln mcp holds, opened: %v %v", res, err)
	}

	clitest.StartServe(t, dir)
	three := connect(&errs[2])
	clitest.CallTool(t, three, "session_open", map[string]any{"session": "d"}, nil)
	errs[2].waitFor(t, "kiln mcp: data directory "+dir+"; sessions of the daemon on "+dir+"/kiln.sock")
}

// syncBuffer is a buffer a subprocess writes to while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until b holds want, failing the test after ten seconds.
func (b *syncBuffer) waitFor(t *testing.T, want string) {
	t.Helper()
	if !poll.Wait(10*time.Second, func() bool { return strings.Contains(b.String(), want) }) {
		t.Fatalf("%q; want %q", b.String(), want)
	}
}
