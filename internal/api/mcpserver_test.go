package api_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpClient is a go-sdk client's session of d's /mcp; each progress message it is sent
// goes to progress, when that is not nil.
func mcpClient(t *testing.T, d *daemon, progress chan<- string) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- req.Params.Message:
			default:
			}
		}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: d.base + "/mcp", HTTPClient: d.client, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callAsync calls tool with args, and a progress token, and sends how the call ended:
// an error when it failed, or answered a tool error.
func callAsync(cs *mcp.ClientSession, tool string, args map[string]any) <-chan error {
	ended := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: tool, Arguments: args}
		params.SetProgressToken(tool)
		res, err := cs.CallTool(context.Background(), params)
		if err == nil && res.IsError {
			err = errors.New(res.Content[0].(*mcp.TextContent).Text)
		}
		ended <- err
	}()
	return ended
}

// await fails t unless ch gives a value within a bound, and returns it.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing within 30s", what)
		panic("unreachable")
	}
}

// sleeper is a cell that says it started, then sleeps for an hour.
const sleeper = "import time\nprint('started', flush=True)\ntime.sleep(3600)"

// runningCell opens session sid in cs and starts a sleeper there through execute,
// waiting up to 50 s; it returns once the cell has started, with how the call ended.
func runningCell(t *testing.T, cs *mcp.ClientSession, progress <-chan string, sid string) <-chan error {
	t.Helper()
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_open", Arguments: map[string]any{"session": sid}}); err != nil {
		t.Fatal(err)
	}
	call := callAsync(cs, "execute", map[string]any{"session": sid, "code": sleeper, "wait_ms": 50000})
	for msg := await(t, progress, "the cell's progress"); !strings.Contains(msg, "started"); msg = await(t, progress, "the cell's progress") {
	}
	return call
}

// TestAnMCPCallInFlightEndsWithItsSession deletes an MCP session while an execute
// waits its 50 s on a cell that sleeps: the session closes at once, and the call ends.
func TestAnMCPCallInFlightEndsWithItsSession(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	progress := make(chan string, 16)
	cs := mcpClient(t, d, progress)
	call := runningCell(t, cs, progress, "s")
	began := time.Now()
	if resp, data := d.do("DELETE", "/mcp", nil, "Mcp-Session-Id", cs.ID()); resp.StatusCode/100 != 2 {
		t.Errorf("DELETE: %d %.200s", resp.StatusCode, data)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("deleting a session with a call in flight took %v; want it prompt, not the call's 50 s", took)
	}
	if err := await(t, call, "the call"); err == nil {
		t.Error("the call of a deleted session answered as if whole")
	}
}

// TestAnMCPCallInFlightDoesNotHoldTheDaemonsStop stops the daemon while an execute
// waits its 50 s on a cell that sleeps: the daemon stops at once.
func TestAnMCPCallInFlightDoesNotHoldTheDaemonsStop(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	progress := make(chan string, 16)
	call := runningCell(t, mcpClient(t, d, progress), progress, "s")
	began := time.Now()
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 4*time.Second {
		t.Errorf("stopping the daemon with a call in flight took %v; want it prompt, not the call's 50 s", took)
	}
	await(t, call, "the call")
}

// blocker listens on a Unix socket for programs that connect to it and wait for a byte:
// accepted has each connection as a program reaches it.
type blocker struct {
	path     string
	accepted chan net.Conn
}

// newBlocker listens until the test ends.
func newBlocker(t *testing.T) *blocker {
	b := &blocker{path: filepath.Join(shortTemp(t), "b.sock"), accepted: make(chan net.Conn, 64)}
	ln, err := net.Listen("unix", b.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted <- conn
		}
	}()
	return b
}

// program is a program that connects to b and returns once it reads a byte or an end.
func (b *blocker) program() string {
	return "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(" + strconv.Quote(b.path) + ")\ns.recv(1)\nreturn 1"
}

// TestAProgramOverMCPEndsWithItsSession deletes an MCP session while its run_program
// runs: the program is aborted, so its connection ends.
func TestAProgramOverMCPEndsWithItsSession(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	b := newBlocker(t)
	cs := mcpClient(t, d, nil)
	call := callAsync(cs, "run_program", map[string]any{"code": b.program(), "limits": map[string]any{"wall_ms": 3600000}})
	conn := await(t, b.accepted, "the program's connection")
	defer conn.Close()
	if resp, data := d.do("DELETE", "/mcp", nil, "Mcp-Session-Id", cs.ID()); resp.StatusCode/100 != 2 {
		t.Errorf("DELETE: %d %.200s", resp.StatusCode, data)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		ended <- err
	}()
	await(t, ended, "the program's end after its session was deleted")
	await(t, call, "the call")
}

// TestRunProgramTakesSomeLimits runs a program over MCP with one limit given: the
// others are optional, and take the runner's defaults.
func TestRunProgramTakesSomeLimits(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	res, err := mcpClient(t, d, nil).CallTool(context.Background(), &mcp.CallToolParams{Name: "run_program",
		Arguments: map[string]any{"code": "return 41 + 1", "limits": map[string]any{"wall_ms": 5000}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"value":42`) {
		t.Fatalf("a program with only wall_ms: %+v", res.Content[0])
	}
}

// TestDaemonProgramsAreBounded starts the most programs a daemon runs at once, each
// waiting: one more is refused (429), and one ended makes room.
func TestDaemonProgramsAreBounded(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	b := newBlocker(t)
	const most = 16
	var wg sync.WaitGroup
	codes := make(chan int, most+1)
	run := func() {
		wg.Go(func() {
			resp, _ := d.do("POST", "/v1/programs:run", map[string]any{"code": b.program()})
			codes <- resp.StatusCode
		})
	}
	var conns []net.Conn
	for range most {
		run()
		conns = append(conns, await(t, b.accepted, "a program's connection"))
	}
	if resp, data := d.do("POST", "/v1/programs:run", map[string]any{"code": "return 1"}); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a program past %d running: %d %.200s; want 429", most, resp.StatusCode, data)
	}
	conns[0].Write([]byte("x")) // the first returns
	if code := await(t, codes, "the first program"); code != http.StatusOK {
		t.Errorf("a program that returned: %d", code)
	}
	if resp, data := d.do("POST", "/v1/programs:run", map[string]any{"code": "return 1"}); resp.StatusCode != http.StatusOK {
		t.Errorf("a program once one ended: %d %.200s", resp.StatusCode, data)
	}
	for _, conn := range conns {
		conn.Close()
	}
	wg.Wait()
}

// TestAnMCPSessionsRequestsInFlightAreBounded has a session wait on a running cell
// with the most requests a session may have in flight: one more is refused (429).
func TestAnMCPSessionsRequestsInFlightAreBounded(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	progress := make(chan string, 4*mcpserver.MaxSessionCalls)
	cs := mcpClient(t, d, progress)
	runningCell(t, cs, progress, "s")
	// The execute holds one place; waits on its cell take the rest, each told running.
	for range mcpserver.MaxSessionCalls - 1 {
		callAsync(cs, "wait", map[string]any{"execution_id": "s:c-1", "wait_ms": 50000})
	}
	for waiting := 0; waiting < mcpserver.MaxSessionCalls-1; {
		if await(t, progress, "the waits' progress") == "running" {
			waiting++ // each sends one a second: more than enough while all wait
		}
	}
	resp, data := d.do("POST", "/mcp", `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"session_list","arguments":{}}}`,
		"Accept", "application/json, text/event-stream", "Mcp-Session-Id", cs.ID(), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a request past %d in flight: %d %.200s; want 429", mcpserver.MaxSessionCalls, resp.StatusCode, data)
	}
	d.stop() // it ends the calls in flight, before the client's close waits for them
}

// TestMCPRefusesBatchesAndLargeBodies posts a JSON-RPC batch, and bodies at and one past
// the bound: the batch and the body past it are refused before they are served.
func TestMCPRefusesBatchesAndLargeBodies(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	cs := mcpClient(t, d, nil)
	headers := []string{"Accept", "application/json, text/event-stream", "Mcp-Session-Id", cs.ID(), "Mcp-Protocol-Version", "2025-06-18"}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"session_list","arguments":{}}}`
	if resp, data := d.do("POST", "/mcp", " ["+call+","+call+"]", headers...); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a batch: %d %.200s; want 400", resp.StatusCode, data)
	}
	// A body of n bytes: a call whose code fills it (the tool refuses code that long).
	body := func(n int) string {
		head, tail := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"session_list","arguments":{},"_pad":"`, `"}}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	if resp, data := d.do("POST", "/mcp", body(mcpserver.MaxBodyBytes), headers...); resp.StatusCode != http.StatusOK {
		t.Errorf("a body of %d bytes: %d %.200s; want it served", mcpserver.MaxBodyBytes, resp.StatusCode, data)
	}
	if resp, data := d.do("POST", "/mcp", body(mcpserver.MaxBodyBytes+1), headers...); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of %d bytes: %d %.200s; want 413", mcpserver.MaxBodyBytes+1, resp.StatusCode, data)
	}
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_list", Arguments: map[string]any{}}); err != nil {
		t.Errorf("the session after both: %v", err)
	}
}

// TestMCPProgressKeepsToTheWait waits 2 s on a sleeping cell with a progress token:
// the answer comes after the one wait, not after the progress's and then the wait's.
func TestMCPProgressKeepsToTheWait(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	progress := make(chan string, 16)
	cs := mcpClient(t, d, progress)
	runningCell(t, cs, progress, "s")
	const wait = 2 * time.Second
	params := &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"execution_id": "s:c-1", "wait_ms": wait.Milliseconds()}}
	params.SetProgressToken("w")
	began := time.Now()
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < wait || took > wait*3/2 {
		t.Errorf("a wait of %v with progress answered after %v", wait, took)
	}
	d.stop() // it ends the execute still waiting, before the client's close waits for it
}

// TestMCPSessionOpenTakesTheHTTPSettings opens a session over MCP with python, cwd and
// limits: its cells run with them, as a session the HTTP API opens does; attaching with
// other settings is refused, saying so.
func TestMCPSessionOpenTakesTheHTTPSettings(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{WorkspaceRoot: os.TempDir()})
	cs := mcpClient(t, d, nil)
	cwd := t.TempDir()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]any{"session": "set", "python": python, "cwd": cwd, "limits": map[string]any{"interrupt_grace_ms": 1500}}
	if err := await(t, callAsync(cs, "session_open", open), "session_open"); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Config struct {
			Python string `json:"python"`
			Cwd    string `json:"cwd"`
			Limits struct {
				InterruptGraceMS int64 `json:"interrupt_grace_ms"`
			} `json:"limits"`
		} `json:"config"`
	}
	resp, data := d.do("GET", "/v1/sessions/set", nil)
	d.want(resp, data, 200, &got)
	if got.Config.Python != python || got.Config.Cwd != cwd || got.Config.Limits.InterruptGraceMS != 1500 {
		t.Fatalf("the session's settings: %+v", got.Config)
	}
	var rec record
	resp, data = d.do("POST", "/v1/sessions/set/executions", map[string]any{"code": "import os, sys\nos.getcwd(), sys.executable", "wait_ms": 10000})
	d.want(resp, data, 200, &rec)
	if r := result(rec); !strings.Contains(r, cwd) {
		t.Fatalf("a cell of the session: %s; want it in %s", r, cwd)
	}
	if err := await(t, callAsync(cs, "session_open", map[string]any{"session": "set"}), "attach"); err != nil {
		t.Fatalf("attaching without settings: %v", err)
	}
	err = await(t, callAsync(cs, "session_open", map[string]any{"session": "set", "cwd": t.TempDir()}), "attach with another cwd")
	if err == nil || !strings.Contains(err.Error(), "close it first") {
		t.Fatalf("attaching with another cwd: %v", err)
	}
}
