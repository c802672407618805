package api_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/mcpserver"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/serve"
)

// daemon is a kiln daemon served in the test's process on a real Unix socket.
type daemon struct {
	t      testing.TB
	dir    string
	info   kilndaemon.Info
	client *http.Client
	base   string // the URL the requests go to
	token  string
	stop   func() error // stops the daemon, once, and says how Serve ended
}

// startDaemon serves a daemon on a fresh data directory until the test ends.
func startDaemon(t testing.TB, opts kilndaemon.Options) *daemon {
	t.Helper()
	if _, err := os.Stat("/usr/bin/env"); err != nil {
		t.Skip(err)
	}
	if opts.DataDir == "" {
		opts.DataDir = shortTemp(t)
	}
	if opts.Workspace == "" {
		opts.Workspace = t.TempDir()
	}
	if opts.Sandbox == "" {
		// Cells here reach the tests' sockets and files outside their workspace (a
		// blocker's socket in /tmp, say): they run unconfined unless a test asks. The
		// sandbox's own tests confine daemon sessions.
		opts.Sandbox = kiln.SandboxNone
	}
	ready := make(chan kilndaemon.Info, 1)
	opts.Ready = func(info kilndaemon.Info) { ready <- info }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kilndaemon.Serve(ctx, opts) }()
	d := &daemon{t: t, dir: opts.DataDir, stop: sync.OnceValue(func() error {
		cancel()
		return <-done
	})}
	select {
	case d.info = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	d.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.info.Socket)
	}}}
	t.Cleanup(d.client.CloseIdleConnections)
	d.base = "http://kiln"
	return d
}

// shortTemp is a temporary directory with a path short enough for a Unix socket.
func shortTemp(t testing.TB) string {
	dir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// do sends a request with body (a string is sent as it is, anything else as JSON) and
// returns the response with its body read.
func (d *daemon) do(method, path string, body any, header ...string) (*http.Response, []byte) {
	d.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			d.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, d.base+path, r)
	if err != nil {
		d.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		d.t.Fatal(err)
	}
	return resp, data
}

// record is what the tests read of an execution.
type record struct {
	ID         string `json:"id"`
	Cell       string `json:"cell"`
	Generation string `json:"generation"`
	Status     string `json:"status"`
	Output     []struct {
		Stream string `json:"stream"`
		Text   string `json:"text"`
	} `json:"output"`
	Error          *string `json:"error"`
	NamespaceLost  bool    `json:"namespace_lost"`
	FreshNamespace bool    `json:"fresh_namespace"`
}

// want decodes a response of status into v.
func (d *daemon) want(resp *http.Response, data []byte, status int, v any) {
	d.t.Helper()
	if resp.StatusCode != status {
		d.t.Fatalf("%s %s: status %d; want %d; body %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, data)
	}
	if v != nil {
		if err := json.Unmarshal(data, v, json.RejectUnknownMembers(false)); err != nil {
			d.t.Fatalf("decoding %s: %v", data, err)
		}
	}
}

func (d *daemon) create(id string) {
	d.t.Helper()
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": id})
	d.want(resp, data, http.StatusCreated, nil)
}

func (d *daemon) execute(sid, code string, waitMS int) (*http.Response, record) {
	d.t.Helper()
	resp, data := d.do("POST", "/v1/sessions/"+sid+"/executions", map[string]any{"code": code, "wait_ms": waitMS})
	var rec record
	if resp.StatusCode == 200 || resp.StatusCode == 202 {
		d.want(resp, data, resp.StatusCode, &rec)
	} else {
		d.t.Fatalf("execute: %d %s", resp.StatusCode, data)
	}
	return resp, rec
}

// streams is the record's stdout and stderr.
func (r record) streams() (stdout, stderr string) {
	for _, o := range r.Output {
		switch o.Stream {
		case "stdout":
			stdout += o.Text
		case "stderr":
			stderr += o.Text
		}
	}
	return stdout, stderr
}

func result(rec record) string {
	for _, o := range rec.Output {
		if o.Stream == "result" {
			return o.Text
		}
	}
	return ""
}

func TestSessionKeepsItsNamespaceAcrossRequests(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s1")
	if resp, rec := d.execute("s1", "x = 20\nx + 1", 10000); resp.StatusCode != 200 || rec.Status != "ok" || result(rec) != "21" {
		t.Fatalf("first cell: %d %+v", resp.StatusCode, rec)
	}
	resp, rec := d.execute("s1", "x * 2", 10000)
	if resp.StatusCode != 200 || result(rec) != "40" || rec.ID != "s1:c-2" || rec.FreshNamespace {
		t.Fatalf("second cell: %d %+v", resp.StatusCode, rec)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/executions/s1:c-2" {
		t.Errorf("Location %q", loc)
	}
	var list struct {
		Sessions []struct {
			ID         string `json:"id"`
			State      string `json:"state"`
			Generation string `json:"generation"`
		} `json:"sessions"`
	}
	resp, data := d.do("GET", "/v1/sessions", nil)
	d.want(resp, data, 200, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != "s1" || list.Sessions[0].State != "open" || list.Sessions[0].Generation != "g-1" {
		t.Fatalf("sessions: %s", data)
	}
	resp, data = d.do("POST", "/v1/sessions", map[string]any{"id": "s1"})
	d.want(resp, data, http.StatusConflict, nil)
	wantCode(t, data, api.CodeExists)
}

func TestLongCellAnswers202ThenLongPoll(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	resp, rec := d.execute("s", "import time\ntime.sleep(0.5)\n'slept'", 0)
	if resp.StatusCode != http.StatusAccepted || rec.Status != "running" {
		t.Fatalf("got %d %+v; want 202 running", resp.StatusCode, rec)
	}
	loc := resp.Header.Get("Location")
	if loc != "/v1/executions/"+rec.ID {
		t.Fatalf("Location %q for %s", loc, rec.ID)
	}
	resp2, data := d.do("POST", "/v1/sessions/s/executions", map[string]any{"code": "1"})
	d.want(resp2, data, http.StatusConflict, nil)
	wantCode(t, data, api.CodeBusy)
	var done record
	resp, data = d.do("GET", loc+"?wait_ms=20000", nil)
	d.want(resp, data, 200, &done)
	if done.Status != "ok" || result(done) != "'slept'" {
		t.Fatalf("long poll: %s", data)
	}
}

func TestInterruptReturnsWhatHappened(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	d.execute("s", "y = 5\nimport time", 10000)
	_, rec := d.execute("s", running+"while True: time.sleep(0.01)", 0)
	d.untilRequest("s", rec.Cell)
	var got record
	resp, data := d.do("POST", "/v1/executions/"+rec.ID+"/interrupt", nil)
	d.want(resp, data, 200, &got)
	if got.Status != "interrupted" || got.NamespaceLost || got.Error == nil || !strings.Contains(*got.Error, "KeyboardInterrupt") {
		t.Fatalf("interrupt: %s", data)
	}
	if _, rec := d.execute("s", "y", 10000); result(rec) != "5" {
		t.Fatalf("the namespace after an interrupt: %+v", rec)
	}
	resp, data = d.do("POST", "/v1/executions/"+rec.ID+"/interrupt", nil)
	d.want(resp, data, http.StatusConflict, nil)
	wantCode(t, data, api.CodeNotRunning)

	// A cell that ignores the interrupt is hard-stopped: the record says its namespace is lost.
	resp, data = d.do("POST", "/v1/sessions", map[string]any{"id": "hard", "limits": map[string]any{"interrupt_grace_ms": 200}})
	d.want(resp, data, 201, nil)
	d.execute("hard", "z = 1\nimport signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)", 10000)
	// Past its await, where the worker no longer reads the interrupt itself.
	_, rec = d.execute("hard", running+"print('looping', flush=True)\nwhile True: time.sleep(0.01)", 0)
	d.untilOutput("hard", rec.Cell, "looping")
	resp, data = d.do("POST", "/v1/executions/"+rec.ID+"/interrupt", nil)
	d.want(resp, data, 200, &got)
	if !got.NamespaceLost {
		t.Fatalf("hard stop: %s", data)
	}
	_, next := d.execute("hard", "'z' in dir()", 10000)
	if !next.FreshNamespace || result(next) != "False" || next.Generation == got.Generation {
		t.Fatalf("the cell after a hard stop: %+v (the stopped one in %s)", next, got.Generation)
	}
}

// running is a line a cell begins with so that a test knows it runs: its host request
// is an event of the session (see untilRequest).
const running = "await runtime.inspect()\n"

// untilRequest follows session sid's events until a host request of cell.
func (d *daemon) untilRequest(sid, cell string) {
	d.t.Helper()
	d.until(sid, "a request of "+cell, func(kind, execution, _ string) bool { return kind == "request" && execution == cell })
}

// untilOutput follows session sid's events until cell's output holds text, in one piece.
func (d *daemon) untilOutput(sid, cell, text string) {
	d.t.Helper()
	d.until(sid, "output "+text+" of "+cell, func(kind, execution, got string) bool {
		return kind == "output" && execution == cell && strings.Contains(got, text)
	})
}

// until follows session sid's events until one matches.
func (d *daemon) until(sid, what string, match func(kind, execution, text string) bool) {
	d.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/sessions/"+sid+"/events", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var e struct {
			Kind   string `json:"kind"`
			Record struct {
				Cell string `json:"cell"`
				Text string `json:"text"`
			} `json:"record"`
		}
		if err := json.Unmarshal(lines.Bytes(), &e, json.RejectUnknownMembers(false)); err != nil {
			d.t.Fatal(err)
		}
		if match(e.Kind, e.Record.Cell, e.Record.Text) {
			return
		}
	}
	d.t.Fatalf("the stream ended before %s: %v", what, lines.Err())
}

func TestIdempotencyKey(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	body := map[string]any{"code": "n = globals().get('n', 0) + 1\nn", "idempotency_key": "k1", "wait_ms": 10000}
	var a, b record
	resp, data := d.do("POST", "/v1/sessions/s/executions", body)
	d.want(resp, data, 200, &a)
	resp, data = d.do("POST", "/v1/sessions/s/executions", body)
	d.want(resp, data, 200, &b)
	if a.ID != b.ID || result(b) != "1" {
		t.Fatalf("a repeat ran again: %+v %+v", a, b)
	}
	resp, data = d.do("POST", "/v1/sessions/s/executions", map[string]any{"code": "2", "idempotency_key": "k1"})
	d.want(resp, data, http.StatusConflict, nil)
	wantCode(t, data, api.CodeKeyReused)
}

// wantCode checks a problem's code and media.
func wantCode(t *testing.T, data []byte, code string) {
	t.Helper()
	var p api.Problem
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("not a problem: %s", data)
	}
	if p.Code != code || p.Type != api.ProblemType+code || p.Title == "" {
		t.Fatalf("problem %s; want code %s", data, code)
	}
}

func TestBadInputIsAPreciseProblem(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	d.create("gone")
	resp, data := d.do("DELETE", "/v1/sessions/gone", nil)
	d.want(resp, data, 200, nil)
	big := `{"code":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`
	atLimit := `{"code":"` + strings.Repeat("#", api.MaxBodyBytes-len(`{"code":""}`)) + `"}`
	for _, c := range []struct {
		name, method, path string
		body               any
		header             []string
		status             int
		code               string
	}{
		{"malformed", "POST", "/v1/sessions/s/executions", `{"code":`, nil, 400, api.CodeMalformedJSON},
		{"not JSON", "POST", "/v1/sessions/s/executions", `code=1`, nil, 400, api.CodeMalformedJSON},
		{"duplicate name", "POST", "/v1/sessions/s/executions", `{"code":"1","code":"2"}`, nil, 400, api.CodeMalformedJSON},
		{"invalid UTF-8", "POST", "/v1/sessions/s/executions", "{\"code\":\"\xff\"}", nil, 400, api.CodeMalformedJSON},
		{"empty body", "POST", "/v1/sessions/s/executions", ``, nil, 400, api.CodeMalformedJSON},
		{"unknown field", "POST", "/v1/sessions/s/executions", `{"code":"1","cod":2}`, nil, 400, api.CodeUnknownField},
		{"unknown nested field", "POST", "/v1/sessions", `{"id":"n","limits":{"idle":1}}`, nil, 400, api.CodeUnknownField},
		{"array body", "POST", "/v1/sessions/s/executions", `[]`, nil, 400, api.CodeInvalid},
		{"wrong type", "POST", "/v1/sessions/s/executions", `{"code":1}`, nil, 400, api.CodeInvalid},
		{"no code", "POST", "/v1/sessions/s/executions", `{}`, nil, 400, api.CodeInvalid},
		{"negative wait", "POST", "/v1/sessions/s/executions", `{"code":"1","wait_ms":-1}`, nil, 400, api.CodeInvalid},
		{"wait past the limit", "POST", "/v1/sessions/s/executions", fmt.Sprintf(`{"code":"1","wait_ms":%d}`, api.MaxWaitMS+1), nil, 400, api.CodeInvalid},
		{"wait not a number", "GET", "/v1/executions/s:c-1?wait_ms=soon", nil, nil, 400, api.CodeInvalid},
		{"oversize", "POST", "/v1/sessions/s/executions", big, nil, 413, api.CodeTooLarge},
		{"form body", "POST", "/v1/sessions/s/executions", `{"code":"1"}`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, api.CodeMediaType},
		{"bad session id", "POST", "/v1/sessions", `{"id":"no/slash"}`, nil, 400, api.CodeInvalid},
		{"bad limit", "POST", "/v1/sessions", `{"id":"l","limits":{"idle_timeout_ms":-5}}`, nil, 400, api.CodeInvalid},
		{"bad cwd", "POST", "/v1/sessions", `{"id":"c","cwd":"/no/such/dir"}`, nil, 400, api.CodeInvalid},
		{"no such python", "POST", "/v1/sessions", `{"id":"p","python":"/no/such/python3"}`, nil, 400, api.CodeInvalid},
		{"a python that is not one", "POST", "/v1/sessions", `{"id":"p","python":"/bin/false"}`, nil, 400, api.CodeInvalid},
		{"session id .", "POST", "/v1/sessions", `{"id":"."}`, nil, 400, api.CodeInvalid},
		{"session id ..", "POST", "/v1/sessions", `{"id":".."}`, nil, 400, api.CodeInvalid},
		{"bad env", "POST", "/v1/sessions", `{"id":"e","env":{"A=B":"1"}}`, nil, 400, api.CodeInvalid},
		{"unknown session", "POST", "/v1/sessions/nobody/executions", `{"code":"1"}`, nil, 404, api.CodeNoSession},
		{"unknown session get", "GET", "/v1/sessions/nobody", nil, nil, 404, api.CodeNoSession},
		{"unknown session events", "GET", "/v1/sessions/nobody/events", nil, nil, 404, api.CodeNoSession},
		{"unknown execution", "GET", "/v1/executions/s:c-99", nil, nil, 404, api.CodeNoExecution},
		{"malformed execution id", "GET", "/v1/executions/s:c-01", nil, nil, 404, api.CodeNoExecution},
		{"execution of an unknown session", "GET", "/v1/executions/nobody:c-1", nil, nil, 404, api.CodeNoSession},
		{"interrupt unknown", "POST", "/v1/executions/s:c-7/interrupt", nil, nil, 404, api.CodeNoExecution},
		{"unknown route", "GET", "/v1/nothing", nil, nil, 404, api.CodeNotFound},
		{"wrong method", "PUT", "/v1/sessions", nil, nil, 405, api.CodeMethod},
		{"stopped session", "POST", "/v1/sessions/gone/executions", `{"code":"1"}`, nil, 410, api.CodeStopped},
		{"stopped session input", "POST", "/v1/sessions/gone/inputs", `{"text":"hi"}`, nil, 410, api.CodeStopped},
		{"stopped twice", "DELETE", "/v1/sessions/gone", nil, nil, 410, api.CodeStopped},
		{"input without text", "POST", "/v1/sessions/s/inputs", `{}`, nil, 400, api.CodeInvalid},
		{"input empty", "POST", "/v1/sessions/s/inputs", `{"text":""}`, nil, 400, api.CodeInvalid},
		{"input one past the send bound", "POST", "/v1/sessions/s/inputs", `{"text":"` + strings.Repeat("é", policy.MaxSendText+1) + `"}`, nil, 400, api.CodeInvalid},
		{"input too big", "POST", "/v1/sessions/s/inputs", `{"text":"` + strings.Repeat("a", 300000) + `"}`, nil, 400, api.CodeInvalid},
		{"bad after", "GET", "/v1/sessions/s/events?after=x", nil, nil, 400, api.CodeInvalid},
		{"bad Last-Event-ID", "GET", "/v1/sessions/s/events", nil, []string{"Last-Event-ID", "-3"}, 400, api.CodeInvalid},
		{"bad follow", "GET", "/v1/sessions/s/events?follow=maybe", nil, nil, 400, api.CodeInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, data := d.do(c.method, c.path, c.body, c.header...)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d; want %d; body %.300s", resp.StatusCode, c.status, data)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			wantCode(t, data, c.code)
		})
	}
	// At the body limit the request is read (and the cell, over the source limit, refused
	// by its record); one byte past, 413.
	resp, data = d.do("POST", "/v1/sessions/s/executions", atLimit)
	var rec record
	d.want(resp, data, 200, &rec)
	if rec.Status != "error" || rec.Error == nil || !strings.Contains(*rec.Error, "over the limit") {
		t.Fatalf("a cell at the body limit: %.300s", data)
	}
	resp, data = d.do("POST", "/v1/sessions/s/executions", atLimit[:len(atLimit)-2]+`##"}`)
	d.want(resp, data, 413, nil)
}

func TestTCPNeedsTheToken(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Listen: "127.0.0.1:0"})
	tok, err := kilndaemon.Token(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(d.dir, kilndaemon.TokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(d.info.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi.Mode(), err)
	}
	tcp := &daemon{t: t, client: &http.Client{}, base: "http://" + d.info.Listen}
	t.Cleanup(tcp.client.CloseIdleConnections)
	resp, data := tcp.do("GET", "/v1/sessions", nil)
	d.want(resp, data, 401, nil)
	wantCode(t, data, api.CodeUnauthorized)
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("no WWW-Authenticate")
	}
	tcp.token = "wrong"
	resp, data = tcp.do("GET", "/v1/sessions", nil)
	d.want(resp, data, 401, nil)
	resp, data = tcp.do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	d.want(resp, data, 401, nil) // the MCP endpoint asks for the token too
	tcp.token = tok
	resp, data = tcp.do("GET", "/v1/sessions", nil)
	d.want(resp, data, 200, nil)
}

// event is what the tests read of an event.
type event struct {
	Seq    int64          `json:"seq"`
	Kind   string         `json:"kind"`
	Record jsontext.Value `json:"record"`
}

func TestEventsNDJSONFollowsAndResumes(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: 50 * time.Millisecond})
	d.create("s")
	req, _ := http.NewRequest("GET", d.base+"/v1/sessions/s/events", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	d.execute("s", "print('hello')", 10000)
	var seen []event
	heartbeats := 0
	for lines.Scan() {
		var e event
		if err := json.Unmarshal(lines.Bytes(), &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatalf("line %s: %v", lines.Bytes(), err)
		}
		if e.Kind == "heartbeat" {
			heartbeats++
			if heartbeats >= 2 && len(seen) > 0 && seen[len(seen)-1].Kind == "execution.end" {
				break
			}
			continue
		}
		if len(seen) > 0 && e.Seq != seen[len(seen)-1].Seq+1 {
			t.Fatalf("a gap: %d after %d", e.Seq, seen[len(seen)-1].Seq)
		}
		seen = append(seen, e)
	}
	kinds := []string{}
	for _, e := range seen {
		kinds = append(kinds, e.Kind)
	}
	if got := strings.Join(kinds, " "); !strings.Contains(got, "session") || !strings.Contains(got, "kernel.reset") ||
		!strings.HasSuffix(got, "execution output execution.end") {
		t.Fatalf("kinds %s", got)
	}
	// ?after= resumes after a sequence, and ?follow=0 ends once caught up.
	resp2, data := d.do("GET", "/v1/sessions/s/events?follow=0&after="+strconv.FormatInt(seen[1].Seq, 10), nil)
	d.want(resp2, data, 200, nil)
	if n := bytes.Count(data, []byte("\n")); n != len(seen)-2 {
		t.Fatalf("resumed %d events; want %d:\n%s", n, len(seen)-2, data)
	}
}

func TestEventsSSEResumeWithLastEventID(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("s")
	d.execute("s", "print(1)", 10000)
	d.execute("s", "print(2)", 10000)
	ids, cut := readSSE(t, d, "", 3)
	if len(ids) != 3 {
		t.Fatalf("ids %v", ids)
	}
	cut()
	d.execute("s", "print(3)", 10000)
	rest, cut2 := readSSE(t, d, strconv.FormatInt(ids[2], 10), 0)
	defer cut2()
	all, _ := readAll(t, d)
	if want := append(ids, rest...); fmt.Sprint(want) != fmt.Sprint(all) {
		t.Fatalf("resumed stream %v + %v; want %v", ids, rest, all)
	}
}

// readSSE opens the session's SSE stream, from lastID if set, and reads n events (every
// event the record holds now when n is 0); cut closes the stream.
func readSSE(t *testing.T, d *daemon, lastID string, n int) (ids []int64, cut func()) {
	t.Helper()
	want := n
	if want == 0 {
		all, _ := readAll(t, d)
		from, _ := strconv.ParseInt(lastID, 10, 64)
		for _, id := range all {
			if id > from {
				want++
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/sessions/s/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cut = func() { cancel(); resp.Body.Close() }
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	var data bool
	for len(ids) < want && lines.Scan() {
		line := lines.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id, err := strconv.ParseInt(line[4:], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		case strings.HasPrefix(line, "data: "):
			data = true
		}
	}
	if !data {
		t.Fatal("no data lines")
	}
	return ids, cut
}

// readAll returns the sequence of every event of session s now.
func readAll(t *testing.T, d *daemon) ([]int64, []event) {
	resp, data := d.do("GET", "/v1/sessions/s/events?follow=0", nil)
	d.want(resp, data, 200, nil)
	var ids []int64
	var evs []event
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e event
		if err := json.Unmarshal(line, &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.Seq)
		evs = append(evs, e)
	}
	return ids, evs
}

func TestSlowConsumerDoesNotBlockCells(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("s")
	// A stream nobody reads: its socket buffers fill, and its writer blocks alone.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/sessions/s/events", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for i := range 20 {
		code := fmt.Sprintf("print('%d' * 60000)", i)
		if _, rec := d.execute("s", code, 20000); rec.Status != "ok" {
			t.Fatalf("cell %d: %+v", i, rec)
		}
	}
}

func TestInputsGoThroughAttention(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	d.create("s")
	var got struct {
		ID        int64          `json:"id"`
		Ref       string         `json:"ref"`
		Attention map[string]any `json:"attention"`
	}
	resp, data := d.do("POST", "/v1/sessions/s/inputs", map[string]any{"text": "hello"})
	d.want(resp, data, 201, &got)
	if got.Ref != "event:"+strconv.FormatInt(got.ID, 10) || got.Attention["action"] == nil {
		t.Fatalf("input: %s", data)
	}
	// At the bound of a send, in characters: the one past it is refused (TestBadInputIsAPreciseProblem).
	resp, data = d.do("POST", "/v1/sessions/s/inputs", map[string]any{"text": strings.Repeat("é", policy.MaxSendText)})
	d.want(resp, data, 201, nil)
	// A cell waiting on the session is given it.
	_, rec := d.execute("s", "await runtime.inspect()", 10000)
	if rec.Status != "ok" || !strings.Contains(result(rec), got.Ref) {
		t.Fatalf("inspect: %+v", rec)
	}
	_, evs := readAll(t, d)
	found := false
	for _, e := range evs {
		found = found || (e.Kind == "event" && bytes.Contains(e.Record, []byte(`"hello"`)))
	}
	if !found {
		t.Fatal("the input is not among the events")
	}
}

func TestSecondDaemonFailsNamingTheFirst(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	err := kilndaemon.Serve(context.Background(), kilndaemon.Options{DataDir: d.dir, Workspace: t.TempDir()})
	if !errors.Is(err, kilndaemon.ErrRunning) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second daemon: %v", err)
	}
	// The first still serves.
	resp, data := d.do("GET", "/v1/sessions", nil)
	d.want(resp, data, 200, nil)
}

func TestProgramsRun(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	var res struct {
		Status string         `json:"status"`
		Value  jsontext.Value `json:"value"`
		Logs   []string       `json:"logs"`
	}
	resp, data := d.do("POST", "/v1/programs:run", map[string]any{"code": "print('hi')\nreturn {'n': 0.1}"})
	d.want(resp, data, 200, &res)
	if res.Status != "ok" || string(res.Value) != `{"n":0.1}` || len(res.Logs) != 1 {
		t.Fatalf("program: %s", data)
	}
	resp, data = d.do("POST", "/v1/programs:run", map[string]any{"code": "return 1", "limits": map[string]any{"cpu_seconds": -1}})
	d.want(resp, data, 400, nil)
	wantCode(t, data, api.CodeProgramInvalid)
	// wall_ms is held to what a time.Duration holds, as kiln.Limits' JSON is: past it
	// the wall would wrap (18446744073710 ms to under a millisecond).
	for _, wall := range []int64{-1, math.MaxInt64/int64(time.Millisecond) + 1, 18446744073710, math.MaxInt64} {
		resp, data = d.do("POST", "/v1/programs:run", map[string]any{"code": "return 1", "limits": map[string]any{"wall_ms": wall}})
		d.want(resp, data, 400, nil)
		wantCode(t, data, api.CodeProgramInvalid)
	}
	resp, data = d.do("POST", "/v1/programs:run", map[string]any{"code": "return 1", "limits": map[string]any{"wall_ms": math.MaxInt64 / int64(time.Millisecond)}})
	d.want(resp, data, 200, &res)
	if res.Status != "ok" {
		t.Fatalf("a program with the longest wall: %s", data)
	}
	resp, data = d.do("POST", "/v1/programs:run", map[string]any{"code": "while True: pass", "limits": map[string]any{"wall_ms": 300}})
	d.want(resp, data, 200, &res)
	if res.Status != "timeout" {
		t.Fatalf("a program past its wall: %s", data)
	}
}

func TestFilesAreConfinedToTheSessionsDirectory(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{WorkspaceRoot: os.TempDir()})
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("no"), 0o600)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "out-link"))
	os.Symlink("../"+filepath.Base(outside), filepath.Join(dir, "out-dir"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "f", "cwd": dir})
	d.want(resp, data, 201, nil)

	resp, data = d.do("PUT", "/v1/sessions/f/files/a/b.txt", "hello")
	d.want(resp, data, 200, nil)
	resp, data = d.do("GET", "/v1/sessions/f/files/a/b.txt", nil)
	if resp.StatusCode != 200 || string(data) != "hello" {
		t.Fatalf("GET: %d %q", resp.StatusCode, data)
	}
	if _, rec := d.execute("f", "open('a/b.txt').read()", 10000); result(rec) != "'hello'" {
		t.Fatalf("the cell does not see the file: %+v", rec)
	}
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/sessions/f/files/nothing", 404, api.CodeFileNotFound},
		{"GET", "/v1/sessions/f/files/out-link", 403, api.CodeFileRefused},
		{"GET", "/v1/sessions/f/files/out-dir/secret", 403, api.CodeFileRefused},
		{"GET", "/v1/sessions/f/files/%2e%2e/" + filepath.Base(outside) + "/secret", 403, api.CodeFileRefused},
		{"GET", "/v1/sessions/f/files/sub", 403, api.CodeFileRefused},
		{"PUT", "/v1/sessions/f/files/out-link", 403, api.CodeFileRefused},
		{"PUT", "/v1/sessions/f/files/out-dir/new", 403, api.CodeFileRefused},
		{"PUT", "/v1/sessions/f/files/sub", 403, api.CodeFileRefused},
		{"GET", "/v1/sessions/nobody/files/x", 404, api.CodeNoSession},
	} {
		var body any
		if c.method == "PUT" {
			body = "x"
		}
		resp, data := d.do(c.method, c.path, body)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s; want %d", c.method, c.path, resp.StatusCode, data, c.status)
			continue
		}
		wantCode(t, data, c.code)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "secret")); string(data) != "no" {
		t.Fatalf("a write went out of the directory: %q", data)
	}
	// At the size limit a file is written and read; one byte past, 413, and nothing is left.
	at := strings.Repeat("z", serve.MaxFileBytes)
	resp, data = d.do("PUT", "/v1/sessions/f/files/big", at)
	d.want(resp, data, 200, nil)
	resp, data = d.do("GET", "/v1/sessions/f/files/big", nil)
	if resp.StatusCode != 200 || len(data) != serve.MaxFileBytes {
		t.Fatalf("GET at the limit: %d, %d bytes", resp.StatusCode, len(data))
	}
	resp, data = d.do("PUT", "/v1/sessions/f/files/bigger", at+"z")
	d.want(resp, data, 413, nil)
	wantCode(t, data, api.CodeTooLarge)
	os.WriteFile(filepath.Join(dir, "huge"), []byte(at+"z"), 0o600)
	resp, data = d.do("GET", "/v1/sessions/f/files/huge", nil)
	d.want(resp, data, 413, nil)
	if ents, _ := os.ReadDir(dir); len(ents) != 6 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files left: %v", names)
	}
}

func TestOpenAPIIsServed(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	resp, data := d.do("GET", "/v1/openapi.json", nil)
	d.want(resp, data, 200, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
}

func TestStreamsAtTheLimit(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/sessions/s/events", nil)
		resp, err := d.client.Do(req) // returns once the headers came: the stream is held
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range api.MaxStreams {
		if resp := open(); resp.StatusCode != 200 {
			t.Fatalf("stream %d of %d: %d", i+1, api.MaxStreams, resp.StatusCode)
		} else {
			defer resp.Body.Close()
		}
	}
	resp := open()
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d.want(resp, data, http.StatusTooManyRequests, nil)
	wantCode(t, data, api.CodeTooMany)
	// Requests that are not streams are served still.
	resp, data = d.do("GET", "/v1/sessions/s", nil)
	d.want(resp, data, 200, nil)
}

// sseStream is an open SSE stream of session s's events.
type sseStream struct {
	lines *bufio.Scanner
	cut   func()
}

// openSSE opens session s's SSE stream, resuming after lastID when it is not "".
func openSSE(t *testing.T, d *daemon, lastID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/sessions/s/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sseStream{lines: bufio.NewScanner(resp.Body), cut: func() { cancel(); resp.Body.Close() }}
	s.lines.Buffer(nil, 1<<20)
	t.Cleanup(s.cut)
	return s
}

// sseEvent is one server-sent event of a session's stream.
type sseEvent struct {
	id   int64
	kind string
	out  struct {
		Record struct {
			Cell   string `json:"cell"`
			Index  int    `json:"index"`
			Stream string `json:"stream"`
			Text   string `json:"text"`
		} `json:"record"`
	}
}

// next reads the stream's next event, skipping heartbeats.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	var e sseEvent
	for s.lines.Scan() {
		line := s.lines.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			e.id, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			e.kind = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &e.out, json.RejectUnknownMembers(false)); err != nil {
				t.Fatal(err)
			}
		case line == "" && e.kind != "":
			return e
		}
	}
	t.Fatalf("the stream ended: %v", s.lines.Err())
	return e
}

func TestEventsCarryARunningCellsOutputOnceAcrossAResume(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("s")
	// The cell prints a line, then waits until the test opens and closes that line's FIFO.
	const lines = 6
	dir := t.TempDir()
	for i := range lines - 1 {
		if err := syscall.Mkfifo(filepath.Join(dir, strconv.Itoa(i)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	step := func(i int) {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)), os.O_WRONLY, 0) // once the cell opens it to read
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	code := fmt.Sprintf("import os, sys\nfor i in range(%d):\n"+
		"    print('line', i, flush=True)\n"+
		"    print('err', i, file=sys.stderr, flush=True) if i %% 2 else None\n"+
		"    open(os.path.join(%q, str(i))).read() if i < %d else None\n", lines, dir, lines-1)
	d.execute("s", "1 + 1", 10000) // no output: no output entry, so no commit of one
	before, evs := readAll(t, d)
	if k := evs[len(evs)-2].Kind + " " + evs[len(evs)-1].Kind; k != "execution execution.end" {
		t.Fatalf("a cell with no output ends its events with %s", k)
	}
	first := openSSE(t, d, strconv.FormatInt(before[len(before)-1], 10))
	_, rec := d.execute("s", code, 0)

	type chunk struct {
		index        int
		stream, text string
	}
	var got []chunk
	last := int64(0)
	take := func(e sseEvent) {
		if e.id <= last {
			t.Fatalf("event %d after %d", e.id, last)
		}
		last = e.id
		if e.kind != "output" {
			return
		}
		r := e.out.Record
		if r.Cell != rec.Cell || r.Index != len(got) {
			t.Fatalf("output event %+v; want %s's chunk %d", r, rec.Cell, len(got))
		}
		got = append(got, chunk{r.Index, r.Stream, r.Text})
	}
	// Two lines through the first stream, then it is cut, and the cell prints on.
	for len(got) < 1 {
		take(first.next(t))
	}
	step(0)
	for len(got) < 2 {
		take(first.next(t))
	}
	first.cut()
	step(1)
	step(2)
	second := openSSE(t, d, strconv.FormatInt(last, 10))
	step(3)
	step(4)
	for {
		e := second.next(t)
		take(e)
		if e.kind == "execution.end" && e.out.Record.Cell == rec.Cell {
			break
		}
	}
	var want []chunk
	var stdout, stderr string
	for i := range lines {
		want = append(want, chunk{len(want), "stdout", fmt.Sprintf("line %d\n", i)})
		stdout += want[len(want)-1].text
		if i%2 == 1 {
			want = append(want, chunk{len(want), "stderr", fmt.Sprintf("err %d\n", i)})
			stderr += want[len(want)-1].text
		}
	}
	// The journal writes what comes within one window together: chunks of one stream
	// may be merged, never reordered, lost or repeated.
	merged := func(cs []chunk) (runs []chunk) {
		for _, c := range cs {
			if n := len(runs); n > 0 && runs[n-1].stream == c.stream {
				runs[n-1].text += c.text
				continue
			}
			runs = append(runs, chunk{len(runs), c.stream, c.text})
		}
		return runs
	}
	if fmt.Sprint(merged(got)) != fmt.Sprint(merged(want)) {
		t.Fatalf("chunks across the resume:\n%v\nwant, merged by stream\n%v", got, merged(want))
	}
	resp, data := d.do("GET", "/v1/executions/"+rec.ID, nil)
	var end record
	d.want(resp, data, 200, &end)
	recOut, recErr := end.streams()
	if end.Status != "ok" || recOut != stdout || recErr != stderr {
		t.Fatalf("the record: %s, stdout %q, stderr %q; want ok and the chunks' %q, %q", end.Status, recOut, recErr, stdout, stderr)
	}
}

// TestAStreamOfLargeRecordsComesWhole runs cells whose records hold more text than one
// read of the stream takes: a stream that ends once caught up still gives every entry,
// in order, to the last.
func TestAStreamOfLargeRecordsComesWhole(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("s")
	for range 3 {
		_, rec := d.execute("s", "class H:\n    def _repr_html_(self): return 'x' * 900_000\nfor _ in range(5): display(H())", 30000)
		if rec.Status != "ok" {
			t.Fatalf("a cell of displays: %+v", rec)
		}
	}
	_, last := d.execute("s", "6 * 7", 30000)
	ids, evs := readAll(t, d)
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			t.Fatalf("a gap: %d after %d", ids[i], ids[i-1])
		}
	}
	end := evs[len(evs)-1]
	if end.Kind != "execution.end" || !bytes.Contains(end.Record, []byte(`"execution_id":"`+last.ID+`"`)) {
		t.Fatalf("the stream ended at %s %.200s; want the end of %s", end.Kind, end.Record, last.Cell)
	}
}

// TestTheEventsOfASessionThatOpensAreItsOwn asks for the events of a session whose
// interpreter is slow to start, while it opens: the stream waits for it, and gives its
// entries alone, not every session's.
func TestTheEventsOfASessionThatOpensAreItsOwn(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	d.create("a")
	d.execute("a", "1 + 1", 30000)
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	slow := filepath.Join(dir, "python3")
	script := "#!/bin/sh\ntouch " + started + "\nsleep 1\nexec python3 \"$@\"\n"
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	created := make(chan int, 1)
	go func() {
		resp, _ := d.do("POST", "/v1/sessions", map[string]any{"id": "slow", "python": slow})
		created <- resp.StatusCode
	}()
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		select {
		case code := <-created:
			t.Fatalf("the session was created (%d) before its interpreter started", code)
		case <-time.After(10 * time.Millisecond):
		}
	}
	resp, data := d.do("GET", "/v1/sessions/slow/events?follow=0", nil)
	d.want(resp, data, 200, nil)
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e struct {
			Session string `json:"session"`
		}
		if err := json.Unmarshal(line, &e, json.RejectUnknownMembers(false)); err != nil || e.Session != "slow" {
			t.Fatalf("an event of session %q in slow's stream (%v): %.200s", e.Session, err, line)
		}
	}
	if code := <-created; code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
}

// TestMCPSessionsAreBounded opens the most MCP sessions the daemon holds: one more
// takes the place of the one idle longest, which is closed, and one more while every
// session is in use is refused.
func TestMCPSessionsAreBounded(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	initialize := func() (*http.Response, []byte) {
		t.Helper()
		return d.do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			"Accept", "application/json, text/event-stream")
	}
	ids := make([]string, 0, mcpserver.MaxSessions)
	for i := range mcpserver.MaxSessions {
		resp, data := initialize()
		if resp.StatusCode != 200 || resp.Header.Get("Mcp-Session-Id") == "" {
			t.Fatalf("session %d: %d %.200s", i, resp.StatusCode, data)
		}
		ids = append(ids, resp.Header.Get("Mcp-Session-Id"))
	}
	resp, data := initialize()
	if resp.StatusCode != 200 {
		t.Fatalf("one session past the bound: %d %.200s; want the oldest idle one's place", resp.StatusCode, data)
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	if resp, data := d.do("POST", "/mcp", ping, "Accept", "application/json, text/event-stream", "Mcp-Session-Id", ids[0]); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the session idle longest, after its place was taken: %d %.200s; want 404", resp.StatusCode, data)
	}
	if resp, data := d.do("POST", "/mcp", ping, "Accept", "application/json, text/event-stream", "Mcp-Session-Id", ids[1]); resp.StatusCode != 200 {
		t.Fatalf("the next session: %d %.200s", resp.StatusCode, data)
	}
}

// TestABodyNobodyReadsCannotHoldTheConnection sends a chunked body, one byte and then
// nothing, to routes that read none: the answer comes, and the connection closes, within
// the drain's bound, not when the client finishes.
func TestABodyNobodyReadsCannotHoldTheConnection(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	for _, path := range []string{"/v1/sessions", "/v1/no/such/route"} {
		conn, err := net.Dial("unix", d.info.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: kiln\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n", path)
		conn.SetReadDeadline(time.Now().Add(api.DrainTimeout + 10*time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer while the body hangs: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("%s: after the answer the connection is still open (%v)", path, err)
		}
	}
}

// TestAWrongMethodSaysWhichAreRight checks a 405's Allow header.
func TestAWrongMethodSaysWhichAreRight(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour})
	resp, data := d.do("PUT", "/v1/sessions", "{}")
	d.want(resp, data, http.StatusMethodNotAllowed, nil)
	if got := resp.Header.Get("Allow"); got != "GET, HEAD, POST" {
		t.Errorf("Allow %q; want %q", got, "GET, HEAD, POST")
	}
}
