package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/tools/mcptest"
)

func TestMain(m *testing.M) {
	mcptest.Main()
	os.Exit(leakcheck.Run(m))
}

// stdioServer is the test binary as an MCP server on stdio, with mode (see mcptest.Env).
func stdioServer(mode string) Server {
	return Server{Name: "demo", Command: []string{os.Args[0]}, Env: append(os.Environ(), mcptest.Env+"="+mode)}
}

// connect connects s and registers its tools in a registry whose calls last at most
// timeout.
func connect(t *testing.T, s Server, timeout time.Duration) *Registry {
	t.Helper()
	_, r := connectClient(t, s, timeout)
	return r
}

// connectClient is connect, with the client too; it is closed when the test ends, if it
// was not before.
func connectClient(t *testing.T, s Server, timeout time.Duration) (*Client, *Registry) {
	t.Helper()
	c, err := Connect(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	list, err := c.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := New(timeout)
	for _, tool := range list {
		if err := r.Add(tool); err != nil {
			t.Fatal(err)
		}
	}
	return c, r
}

// call calls demo.name and returns its result, or its error's code and message.
func call(r *Registry, name, args string) string {
	v, err := r.Call(context.Background(), "demo", name, jsontext.Value(args))
	if err != nil {
		return Code(err) + ": " + message(err)
	}
	return string(v)
}

func testServer(t *testing.T, s Server) {
	r := connect(t, s, time.Minute)
	var names []string
	for _, e := range r.Catalog() {
		names = append(names, e.Attr)
		if e.Name == "add" && !strings.Contains(string(e.InputSchema), `"required":["a","b"]`) {
			t.Errorf("add's schema: %s", e.InputSchema)
		}
	}
	slices.Sort(names)
	if want := []string{"add", "echo", "exit", "fail", "hang", "huge"}; !slices.Equal(names, want) {
		t.Errorf("tools %v; want %v", names, want)
	}
	for _, tt := range []struct{ name, args, want string }{
		{"add", `{"a":2,"b":3}`, `{"sum":5}`},
		{"echo", `{"text":"hi"}`, `"hi"`},
		{"fail", `{}`, "tool_error: it failed"},
		{"add", `{"a":"2","b":3}`, "invalid_arguments: demo.add: arguments.a: want integer, got string"},
		{"huge", `{"bytes":1000}`, `"` + strings.Repeat("x", 1000) + `"`},
	} {
		if got := call(r, tt.name, tt.args); got != tt.want {
			t.Errorf("%s(%s):\ngot  %.300s\nwant %s", tt.name, tt.args, got, tt.want)
		}
	}
	short := connect(t, s, 200*time.Millisecond) // a second session of the server
	if got, want := call(short, "hang", `{}`), "tool_timeout: demo.hang took over 200ms"; got != want {
		t.Errorf("hang: got %s; want %s", got, want)
	}
	if got := call(short, "echo", `{"text":"after a timeout"}`); got != `"after a timeout"` {
		t.Errorf("a call after a timeout: %s", got)
	}
	if got := call(r, "huge", `{"bytes":5000000}`); !strings.HasPrefix(got, "tool_unavailable: mcp server demo: calling huge") {
		t.Errorf("a result over %d bytes: %.300s; want the server unavailable", MaxMessageBytes, got)
	}
	if got := call(r, "echo", `{"text":"x"}`); !strings.HasPrefix(got, "tool_unavailable:") {
		t.Errorf("a call after the server was cut off: %.300s; want unavailable", got)
	}
}

func TestStdioServer(t *testing.T) { testServer(t, stdioServer("stdio")) }

func TestHTTPServer(t *testing.T) { testServer(t, Server{Name: "demo", URL: mcptest.HTTP(t)}) }

func TestAServerThatExitsSaysHow(t *testing.T) {
	r := connect(t, stdioServer("stdio"), time.Minute)
	got := call(r, "exit", `{}`)
	if !strings.HasPrefix(got, "tool_unavailable:") || !strings.Contains(got, "exited: exit status 3") {
		t.Errorf("a server that exits in a call: %s", got)
	}
}

func TestAServerThatFailsToStartSaysWhy(t *testing.T) {
	_, err := Connect(context.Background(), stdioServer("fail"), nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "mcptest: cannot start") ||
		!strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("got %v; want ErrUnavailable with the stderr and the exit status", err)
	}
	_, err = Connect(context.Background(), Server{Name: "demo", Command: []string{"/nonexistent/server"}}, nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("a missing command: %v; want ErrUnavailable", err)
	}
}

func TestAServerThatNeverAnswersTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Connect(ctx, Server{Name: "demo", Command: []string{"sleep", "60"}}, nil)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "deadline") {
		t.Errorf("got %v; want ErrUnavailable after the deadline", err)
	}
}

func TestConnectRefuses(t *testing.T) {
	for _, s := range []Server{{Name: "a-b", URL: "http://x"}, {Name: "a"}, {Name: "a", URL: "http://x", Command: []string{"x"}}} {
		if _, err := Connect(context.Background(), s, nil); !errors.Is(err, ErrInvalidTool) {
			t.Errorf("%+v: %v; want ErrInvalidTool", s, err)
		}
	}
}

func TestAServerWithEndlessPagesOfToolsIsRefused(t *testing.T) {
	c, err := Connect(context.Background(), stdioServer("endless"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Tools(context.Background()); !errors.Is(err, ErrInvalidTool) || !strings.Contains(err.Error(), "pages") {
		t.Errorf("got %v; want ErrInvalidTool after %d pages", err, MaxTools)
	}
}

// rawServer is a stdio MCP server in Python, speaking JSON-RPC by hand: tool "big"
// answers structured content with an integer a float64 rounds, and its text; tool "flood"
// sends n pings to kiln and stops reading, never answering; tool "spawn" starts a child
// in the server's group, its stdio closed, writes its pid to the call's file, answers, and
// exits.
const rawServer = `import json, os, subprocess, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    method, id_ = m.get("method"), m.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id_, "result": {"protocolVersion": m["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id_, "result": {"tools": [
            {"name": "flood", "inputSchema": {"type": "object"}},
            {"name": "spawn", "inputSchema": {"type": "object", "properties": {"file": {"type": "string"}}}},
            {"name": "big", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call" and m["params"]["name"] == "big":
        value = {"n": 12345678901234567891, "x": [1.5, "é"]}
        send({"jsonrpc": "2.0", "id": id_, "result": {"structuredContent": value,
              "content": [{"type": "text", "text": json.dumps(value, indent=1, ensure_ascii=False)}]}})
    elif method == "tools/call" and m["params"]["name"] == "flood":
        for i in range(100000):
            send({"jsonrpc": "2.0", "id": "s-%d" % i, "method": "ping"})
        subprocess.run(["sleep", "60"])
    elif method == "tools/call" and m["params"]["name"] == "spawn":
        child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(m["params"]["arguments"]["file"], "w") as f:
            f.write(str(child.pid))
        send({"jsonrpc": "2.0", "id": id_, "result": {"content": [{"type": "text", "text": "spawned"}]}})
        sys.exit(0)
    elif id_ is not None:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no method " + method}})
`

func rawStdioServer(t *testing.T) Server {
	script := t.TempDir() + "/server.py"
	if err := os.WriteFile(script, []byte(rawServer), 0o600); err != nil {
		t.Fatal(err)
	}
	return Server{Name: "demo", Command: []string{"python3", script}}
}

// TestAServerThatFloodsKilnWithRequestsIsCutOff has a server send kiln requests and stop
// reading the answers: it is cut off once it has MaxServerRequests unanswered, the call
// says so, and closing the session takes no longer than the server's stop.
func TestAServerThatFloodsKilnWithRequestsIsCutOff(t *testing.T) {
	c, r := connectClient(t, rawStdioServer(t), 30*time.Second)
	if got := call(r, "flood", `{}`); !strings.HasPrefix(got, "tool_unavailable:") || !strings.Contains(got, "unanswered") {
		t.Errorf("a server flooding kiln: %.300s; want it cut off", got)
	}
	began := time.Now()
	c.Close()
	if took := time.Since(began); took > 3*stopGrace {
		t.Errorf("Close took %v; want at most about %v", took, stopGrace)
	}
}

// TestAServersLeftoversEndWithIt has a server start a child in its own process group
// and exit: the child does not outlive the session.
func TestAServersLeftoversEndWithIt(t *testing.T) {
	c, r := connectClient(t, rawStdioServer(t), 30*time.Second)
	file := t.TempDir() + "/child.pid"
	if got := call(r, "spawn", `{"file":"`+file+`"}`); got != `"spawned"` {
		t.Fatalf("spawn: %s", got)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(data))
	c.Close()
	// The child, killed, is reaped by init; until then it may linger as a zombie.
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the server's child %d outlived the session", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStructuredContentKeepsEveryDigit has a server answer an integer past a float64's
// precision as structured content, with its serialization as text, as the specification
// asks: the call gives every digit.
func TestStructuredContentKeepsEveryDigit(t *testing.T) {
	_, r := connectClient(t, rawStdioServer(t), 30*time.Second)
	if got, want := call(r, "big", `{}`), `{"n":12345678901234567891,"x":[1.5,"é"]}`; got != want {
		t.Errorf("got %s; want %s", got, want)
	}
}
