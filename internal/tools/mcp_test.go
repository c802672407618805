package tools

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
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
	return r
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
