package tools

import (
	"context"
	"errors"
	"fmt"
	"github.com/kilnrt/kiln/internal/lossless"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
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
            {"name": "big", "inputSchema": {"type": "object"}},
            {"name": "exact", "inputSchema": {"type": "object"}},
            {"name": "pow60", "inputSchema": {"type": "object"}},
            {"name": "deep", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call" and m["params"]["name"] in ("exact", "pow60", "deep"):
        value = {"exact": '{"n": 9007199254740993}', "pow60": '{"n": 1152921504606846976}',
                 "deep": '{"d": ' + "[" * 5000 + "]" * 5000 + '}'}[m["params"]["name"]]
        sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"structuredContent": %s}}\n' % (json.dumps(id_), value))
        sys.stdout.flush()
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
	ended := func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(stat), ") Z ")
	}
	if !poll.Wait(5*time.Second, ended) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the server's child %d outlived the session", pid)
	}
}

// TestStructuredContentKeepsEveryDigit has a server answer an integer past a float64's
// precision as structured content, with its serialization as text, as the specification
// asks: the call gives the structured content as the server wrote it, every digit kept.
func TestStructuredContentKeepsEveryDigit(t *testing.T) {
	_, r := connectClient(t, rawStdioServer(t), 30*time.Second)
	if got, want := call(r, "big", `{}`), `{"n":12345678901234567891,"x":[1.5,"\u00e9"]}`; got != want {
		t.Errorf("got %s; want %s", got, want)
	}
}

// TestResultsAreReadAsFd3FramesAre has a server answer structured content alone, with
// no text beside it: an integer past 2^53 reaches a cell with every digit and is refused
// to a program, as a double would round it, where 2^60, which a double holds, reaches
// both; a result nested 5000 deep reaches both whole, and the server is not cut off.
func TestResultsAreReadAsFd3FramesAre(t *testing.T) {
	_, r := connectClient(t, rawStdioServer(t), 30*time.Second)
	deep := `{"d":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`
	for _, tt := range []struct{ tool, cell, program string }{
		{"exact", `{"n":9007199254740993}`, "error: tool_error: the result holds an integer a double cannot hold exactly"},
		{"pow60", `{"n":1152921504606846976}`, `{"n":1152921504606846976}`},
		{"deep", deep, deep},
		{"big", `{"n":12345678901234567891,"x":[1.5,"\u00e9"]}`, "error: tool_error: the result holds an integer a double cannot hold exactly"},
	} {
		if got := call(r, tt.tool, `{}`); got != tt.cell {
			t.Errorf("%s to a cell: %.200s; want %.200s", tt.tool, got, tt.cell)
		}
		var got string
		v, err := r.Bindings()[0].Funcs[tt.tool](context.Background(), lossless.NewObject())
		if err != nil {
			got = "error: " + err.Error()
		} else {
			got = string(lossless.Encode(v))
		}
		if got != tt.program {
			t.Errorf("%s to a program: %.200s; want %.200s", tt.tool, got, tt.program)
		}
	}
}

// floodServer is a streamable HTTP MCP server spoken by hand, with one tool, "flood". A
// call's answer is an event stream: notes notifications, then requests requests to kiln
// of every kind; then, if requests is within MaxServerRequests, once kiln's answers to
// them have all come, the result "done". It holds kiln's answers (their POSTs) until
// the test ends, or kiln gives them up.
type floodServer struct {
	notes, requests int
	answers         chan struct{} // one per answer come
	release         chan struct{} // closed by letGo
	once            sync.Once

	opened, open atomic.Int64  // connections kiln opened, and those still open
	closing      chan struct{} // a connection closed
}

// floodHTTP serves a floodServer on loopback until the test ends and returns it, and
// kiln's server for it.
func floodHTTP(t *testing.T, notes, requests int) (*floodServer, Server) {
	f := &floodServer{notes: notes, requests: requests, answers: make(chan struct{}, requests), release: make(chan struct{}),
		closing: make(chan struct{}, 1)}
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ConnState = f.track
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(f.letGo) // before the server's close, which waits for its handlers
	return f, Server{Name: "demo", URL: srv.URL}
}

// track counts kiln's connections as they open and close.
func (f *floodServer) track(_ net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		f.opened.Add(1)
		f.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		f.open.Add(-1)
		select {
		case f.closing <- struct{}{}:
		default:
		}
	}
}

// letGo ends the holding of kiln's answers.
func (f *floodServer) letGo() { f.once.Do(func() { close(f.release) }) }

// Messages of a flood, by kind: the requests lack their ids.
var (
	floodNotes = []string{
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"s-0"}}`,
		`{"jsonrpc":"2.0","method":"notifications/unknown","params":{}}`,
	}
	floodRequests = []string{
		`"method":"ping"`,
		`"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10}`,
		`"method":"roots/list"`,
		`"method":"elicitation/create","params":{"message":"hi","requestedSchema":{"type":"object"}}`,
		`"method":"unknown/method","params":{}`,
	}
)

func (f *floodServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var m struct {
		ID     jsontext.Value `json:"id"`
		Method string         `json:"method"`
		Params struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"params"`
	}
	if err := json.UnmarshalRead(r.Body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	reply := func(member string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,%s}`, m.ID, member)
	}
	switch {
	case m.Method == "": // kiln's answer to a request
		f.answers <- struct{}{}
		select {
		case <-f.release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusAccepted)
	case m.ID == nil:
		w.WriteHeader(http.StatusAccepted)
	case m.Method == "initialize":
		reply(`"result":{"protocolVersion":"` + m.Params.ProtocolVersion +
			`","capabilities":{"tools":{}},"serverInfo":{"name":"flood","version":"1"}}`)
	case m.Method == "tools/list":
		reply(`"result":{"tools":[{"name":"flood","inputSchema":{"type":"object"}}]}`)
	case m.Method == "tools/call":
		f.flood(w, r, m.ID)
	default:
		reply(`"error":{"code":-32601,"message":"no method ` + m.Method + `"}`)
	}
}

// flood answers the call id with its event stream.
func (f *floodServer) flood(w http.ResponseWriter, r *http.Request, id jsontext.Value) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range f.notes {
		fmt.Fprintf(w, "data: %s\n\n", floodNotes[i%len(floodNotes)])
	}
	for i := range f.requests {
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"s-%d\",%s}\n\n", i, floodRequests[i%len(floodRequests)])
	}
	w.(http.Flusher).Flush()
	if f.requests > MaxServerRequests {
		<-r.Context().Done() // kiln gives the call up
		return
	}
	for range f.requests {
		select {
		case <-f.answers:
		case <-r.Context().Done():
			return
		}
	}
	fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n", id)
}

// closeWithin closes c and fails t if that takes over limit. A close still waiting on
// the answers f holds after 3*stopGrace has them let go, and ends.
func closeWithin(t *testing.T, c *Client, f *floodServer, limit time.Duration) {
	t.Helper()
	began := time.Now()
	watchdog := time.AfterFunc(3*stopGrace, f.letGo)
	defer watchdog.Stop()
	c.Close()
	if took := time.Since(began); took > limit {
		t.Errorf("Close took %v with kiln's answers held; want at most %v", took, limit)
	}
}

// TestAnHTTPServerThatFloodsKilnWithRequestsIsCutOff has an HTTP server send kiln
// requests in a call's stream and hold kiln's answers: it is cut off once it has more
// than MaxServerRequests unanswered, the call says so, and the close, the answers still
// held, is prompt.
func TestAnHTTPServerThatFloodsKilnWithRequestsIsCutOff(t *testing.T) {
	f, s := floodHTTP(t, 0, MaxServerRequests+1)
	c, r := connectClient(t, s, 10*time.Second)
	if got := call(r, "flood", `{}`); !strings.HasPrefix(got, "tool_unavailable:") || !strings.Contains(got, "unanswered") {
		t.Errorf("a server flooding kiln: %.300s; want it cut off", got)
	}
	closeWithin(t, c, f, stopGrace/2)
}

// TestAnHTTPServerAtTheRequestBoundIsServed has an HTTP server send kiln exactly
// MaxServerRequests requests and hold kiln's answers until it has them all: it is not
// cut off, and the call has its result. Closing the session, the answers still held,
// gives them up after stopGrace.
func TestAnHTTPServerAtTheRequestBoundIsServed(t *testing.T) {
	f, s := floodHTTP(t, 0, MaxServerRequests)
	c, r := connectClient(t, s, 10*time.Second)
	if got := call(r, "flood", `{}`); got != `"done"` {
		t.Errorf("a server at the bound: %.300s; want its result", got)
	}
	closeWithin(t, c, f, 2*stopGrace)
}

// TestAServersNotificationsCostKilnNoGoroutines has an HTTP server send kiln a flood of
// notifications in a call's stream: kiln drops them as it reads them, starting no
// goroutine for each (the SDK would, and queue each), and the call has its result.
func TestAServersNotificationsCostKilnNoGoroutines(t *testing.T) {
	const notes = 10000
	_, s := floodHTTP(t, notes, 0)
	_, r := connectClient(t, s, 30*time.Second)
	before := goroutinesCreated()
	if got := call(r, "flood", `{}`); got != `"done"` {
		t.Errorf("a server flooding kiln with notifications: %.300s; want its result", got)
	}
	if n := goroutinesCreated() - before; n > notes/10 {
		t.Errorf("%d notifications started %d goroutines; want a few", notes, n)
	}
}

// TestKilnsAnswersReuseAnHTTPServersConnections has an HTTP server send kiln
// MaxServerRequests requests in each of two calls, and take the answers at once: the
// second call's answers go over the connections of the first's, and closing the session
// closes every connection kiln opened.
func TestKilnsAnswersReuseAnHTTPServersConnections(t *testing.T) {
	f, s := floodHTTP(t, 0, MaxServerRequests)
	f.letGo()
	c, r := connectClient(t, s, 10*time.Second)
	if got := call(r, "flood", `{}`); got != `"done"` {
		t.Fatalf("the first call: %.300s; want its result", got)
	}
	opened := f.opened.Load()
	if got := call(r, "flood", `{}`); got != `"done"` {
		t.Fatalf("the second call: %.300s; want its result", got)
	}
	if n := f.opened.Load() - opened; n > MaxServerRequests/4 {
		t.Errorf("the second call's %d answers opened %d connections; want the first's used again", MaxServerRequests, n)
	}
	c.Close()
	deadline := time.After(10 * time.Second)
	for f.open.Load() > 0 {
		select {
		case <-f.closing:
		case <-deadline:
			t.Fatalf("%d of kiln's connections still open after its close", f.open.Load())
		}
	}
}

// goroutinesCreated is how many goroutines the test binary has started.
func goroutinesCreated() uint64 {
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}
