package kiln_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/perfstat"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/tools/mcptest"
)

// calcTools are Go tools for the tests: calc.add with a schema, calc.fail that always
// fails, calc.block that waits for its ctx.
func calcTools(started chan<- struct{}) []kiln.Tool {
	return []kiln.Tool{
		{Namespace: "calc", Name: "add", Description: "Add two integers.",
			InputSchema: []byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`),
			Handler: func(ctx context.Context, arguments []byte) (any, error) {
				var p struct {
					A int `json:"a"`
					B int `json:"b"`
				}
				if err := json.Unmarshal(arguments, &p); err != nil {
					return nil, err
				}
				return map[string]int{"sum": p.A + p.B}, nil
			}},
		{Namespace: "calc", Name: "fail", Description: "Always fails.",
			Handler: func(ctx context.Context, arguments []byte) (any, error) {
				return nil, errors.New("the tool says no")
			}},
		{Namespace: "calc", Name: "block", Description: "Waits until cancelled.",
			Handler: func(ctx context.Context, arguments []byte) (any, error) {
				started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}},
	}
}

func TestCellsCallGoTools(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	started := make(chan struct{}, 4)
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: dir,
		Tools: calcTools(started), ToolTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	cells := []struct{ code, want string }{
		{"dir(tools), dir(tools.calc)", "(['calc'], ['add', 'block', 'fail'])"},
		{"'Add two integers.' in tools.calc.add.__doc__ and '\"required\"' in tools.calc.add.__doc__", "True"},
		{"await tools.calc.add(a=2, b=3)", "{'sum': 5}"},
		{"try:\n    await tools.calc.add(a='x', b=3)\nexcept tools.ToolError as e:\n    r = (e.code, e.message)\nr",
			"('invalid_arguments', 'calc.add: arguments.a: want integer, got string')"},
		{"try:\n    await tools.calc.add(a=1, b=2, c=3)\nexcept tools.ToolError as e:\n    r = e.code\nr", "'invalid_arguments'"},
		{"try:\n    await tools.calc.fail()\nexcept tools.ToolError as e:\n    r = (e.code, e.message)\nr", "('tool_error', 'the tool says no')"},
		{"try:\n    await tools.calc.block()\nexcept tools.ToolError as e:\n    r = e.code\nr", "'tool_timeout'"},
		{"try:\n    tools.nope\nexcept AttributeError as e:\n    r = str(e)\nr", `"no tool namespace 'nope'; the host offers: calc"`},
	}
	for _, c := range cells {
		rec, err := wb.Execute(context.Background(), c.code)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(rec); rec.Status != kiln.StatusOK || got != c.want {
			if rec.Error != nil {
				t.Log(*rec.Error)
			}
			t.Errorf("%s:\ngot %s %q %v; want %q", c.code, rec.Status, got, rec.Error, c.want)
		}
	}
	<-started
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenDir(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	entries, err := st.Log(context.Background(), store.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	var offered []string
	seen := map[int64]bool{} // a request's journal has an entry for it and one for its reply
	for _, e := range entries {
		if r, ok := e.Record.(store.KernelReset); ok && e.Kind == store.KindKernelReset {
			offered = append(offered, string(r.Loaded))
		}
		if r, ok := e.Record.(store.RequestRecord); ok && r.Method == "tools.call" && r.Reply != nil && !seen[r.ID] {
			seen[r.ID] = true
			calls = append(calls, fmt.Sprintf("%s %s", r.Body, r.Reply.Kind))
			if r.Reply.RepliedAt.Before(r.ReceivedAt) {
				t.Errorf("a reply before its request: %+v", r)
			}
		}
	}
	want := []string{
		`{"method":"tools.call","namespace":"calc","name":"add","arguments":{"a":2,"b":3}} ok`,
		`{"method":"tools.call","namespace":"calc","name":"add","arguments":{"a":"x","b":3}} error`,
		`{"method":"tools.call","namespace":"calc","name":"add","arguments":{"a":1,"b":2,"c":3}} error`,
		`{"method":"tools.call","namespace":"calc","name":"fail","arguments":{}} error`,
		`{"method":"tools.call","namespace":"calc","name":"block","arguments":{}} error`,
	}
	if len(offered) != 1 || !strings.Contains(offered[0], `"tools":["calc.add","calc.fail","calc.block"]`) {
		t.Errorf("the generation's record: %s; want the tools it was offered", offered)
	}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("recorded calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
}

// text is a record's output, joined.
func text(rec kiln.Record) string {
	var b strings.Builder
	for _, o := range rec.Output {
		b.WriteString(o.Text)
	}
	return strings.TrimSpace(b.String())
}

func TestAToolCallEndsWithItsCellAndCountsTowardTheCap(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{Tools: calcTools(started)})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	rec, err := wb.Execute(ctx, "await tools.calc.block()")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kiln.StatusInterrupted {
		t.Errorf("a cell interrupted in a tool call: %s; want interrupted", rec.Status)
	}
	rec, err = wb.Execute(context.Background(), `
codes = []
for i in range(129):
    try:
        await tools.calc.add(a=i, b=1)
        codes.append("ok")
    except tools.ToolError as e:
        codes.append(e.code)
codes.count("ok"), codes[-1]`)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(rec); got != "(128, 'request_limit')" {
		t.Errorf("129 calls in a cell: %s %v; want 128 answered and the last refused", got, rec.Error)
	}
}

func TestCellsCallAnMCPServerOverHTTP(t *testing.T) {
	t.Parallel()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{
		MCP: []kiln.MCPServer{{Name: "demo", URL: mcptest.HTTP(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	for _, c := range []struct{ code, want string }{
		{"await tools.demo.add(a=2, b=3)", "{'sum': 5}"},
		{"await tools.demo.echo(text='hi')", "'hi'"},
		{"try:\n    await tools.demo.fail()\nexcept tools.ToolError as e:\n    r = (e.code, e.message)\nr", "('tool_error', 'it failed')"},
		// A result over what a reply carries is refused, and the server goes on.
		{"try:\n    await tools.demo.huge(bytes=2000000)\nexcept tools.ToolError as e:\n    r = e.code\nr", "'reply_too_large'"},
		{"await tools.demo.echo(text='still here')", "'still here'"},
		{"tools.demo.add.__module__, tools.demo.add.__qualname__", "('tools.demo', 'tools.demo.add')"},
	} {
		rec, err := wb.Execute(context.Background(), c.code)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(rec); got != c.want {
			t.Errorf("%s:\ngot %s %q %v; want %q", c.code, rec.Status, got, rec.Error, c.want)
		}
	}
}

func TestProgramsCallTheSameTools(t *testing.T) {
	t.Parallel()
	ts, err := kiln.OpenToolset(context.Background(), kiln.ToolsetOptions{Tools: calcTools(make(chan struct{}, 1)),
		MCP: []kiln.MCPServer{{Name: "demo", URL: mcptest.HTTP(t)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	res, err := kiln.Run(context.Background(), kiln.Program{Namespaces: ts.Namespaces(), Source: `
out = [await calc.add({"a": 2, "b": 3}), await demo.add({"a": 4, "b": 5})]
try:
    await calc.fail()
except ToolError as e:
    out.append([str(e), e.tool])
return out`})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"sum":5},{"sum":9},["tool_error: the tool says no","fail"]]`
	if got := encoded(t, res.Value); res.Status != kiln.RunOK || got != want {
		t.Errorf("got %s %s %s; want %s", res.Status, got, res.Error, want)
	}
}

func TestToolsetNamespaceFuncs(t *testing.T) {
	t.Parallel()
	ts, err := kiln.OpenToolset(context.Background(), kiln.ToolsetOptions{Tools: calcTools(make(chan struct{}, 1))})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	ns := ts.Namespaces()
	if len(ns) != 1 || ns[0].Global != "calc" || ns[0].Funcs != nil {
		t.Fatalf("Namespaces = %+v; want calc alone, its Funcs nil", ns)
	}
	// Funcs add a binding beside the tools, and replace the tool of their name.
	ns[0].Funcs = map[string]kiln.Func{
		"fail":  func(context.Context, kiln.Value) (kiln.Value, error) { return kiln.String("replaced"), nil },
		"extra": func(_ context.Context, args kiln.Value) (kiln.Value, error) { return args, nil },
	}
	res, err := kiln.Run(context.Background(), kiln.Program{Namespaces: ns,
		Source: `return [await calc.add({"a": 1, "b": 2}), await calc.fail(), await calc.extra([1])]`})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := encoded(t, res.Value), `[{"sum":3},"replaced",[1]]`; res.Status != kiln.RunOK || got != want {
		t.Errorf("got %s %s %s; want %s", res.Status, got, res.Error, want)
	}
}

// timedCalls is a cell that awaits call 100 times and shows each duration in ns.
func timedCalls(call string) string {
	return "import time\n" +
		"async def timed():\n" +
		"    t0 = time.perf_counter_ns()\n" +
		"    await " + call + "\n" +
		"    return time.perf_counter_ns() - t0\n" +
		"' '.join([str(await timed()) for _ in range(100)])"
}

// BenchmarkToolCall is one tool call from a cell, recorded durably (the request
// committed before the call, the reply after it): a Go tool, and an MCP server's tool
// over streamable HTTP on loopback. CPU is the host's and the worker's.
func BenchmarkToolCall(b *testing.B) {
	echo := kiln.Tool{Namespace: "bench", Name: "echo", Description: "Answer the arguments.",
		InputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string"}}}`),
		Handler:     func(_ context.Context, args []byte) (any, error) { return string(args), nil }}
	for _, c := range []struct {
		name string
		opts kiln.WorkbenchOptions
		call string
	}{
		{"go", kiln.WorkbenchOptions{Tools: []kiln.Tool{echo}}, "tools.bench.echo(text='hi')"},
		{"mcp-http", kiln.WorkbenchOptions{MCP: []kiln.MCPServer{{Name: "demo", URL: mcptest.HTTP(b)}}}, "tools.demo.echo(text='hi')"},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.opts.DataDir = b.TempDir()
			wb, err := kiln.OpenWorkbench(context.Background(), c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer wb.Close()
			m := perfstat.Start(workerPid(b, wb))
			n := 0
			for b.Loop() {
				rec, err := wb.Execute(context.Background(), timedCalls(c.call))
				if err != nil || rec.Status != kiln.StatusOK {
					b.Fatalf("%v %+v", err, rec)
				}
				for _, f := range strings.Fields(strings.Trim(text(rec), "'")) {
					ns, _ := strconv.Atoi(f)
					m.Add(time.Duration(ns))
					n++
				}
			}
			m.Report(b, n)
		})
	}
}

func TestACellsToolCallsRunAtOnce(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	wait := kiln.Tool{Namespace: "sync", Name: "first", Handler: func(ctx context.Context, _ []byte) (any, error) {
		select {
		case <-second:
			return "first", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	signal := kiln.Tool{Namespace: "sync", Name: "second", Handler: func(context.Context, []byte) (any, error) {
		close(second)
		return "second", nil
	}}
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{Tools: []kiln.Tool{wait, signal}})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	rec, err := wb.Execute(context.Background(), "import asyncio\nawait asyncio.gather(tools.sync.first(), tools.sync.second())")
	if err != nil {
		t.Fatal(err)
	}
	if got := text(rec); got != "['first', 'second']" {
		t.Errorf("two calls gathered: %s %q %v; want both answered", rec.Status, got, rec.Error)
	}
}

// namesServer is a stdio MCP server in Python whose tools' names are a name of 128 bytes,
// one of 129, and été; each answers its own name.
const namesServer = `import json, sys
names = ["y" * 128, "x" * 129, "\u00e9t\u00e9"]
for line in sys.stdin:
    m = json.loads(line)
    method, id_ = m.get("method"), m.get("id")
    if method == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "names", "version": "1"}}
    elif method == "tools/list":
        r = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}
    elif method == "tools/call":
        r = {"content": [{"type": "text", "text": m["params"]["name"]}]}
    elif id_ is None:
        continue
    else:
        r = None
    out = {"jsonrpc": "2.0", "id": id_, "result": r} if r is not None else \
        {"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no method"}}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
`

// TestAnMCPToolNamedPastTheBoundIsLeftOut: a server's tool whose name is over
// MaxIdentifierBytes is left out and the others are served, a name at the bound among
// them; a name in Unicode is reached by itself, as Python reads it.
func TestAnMCPToolNamedPastTheBoundIsLeftOut(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "names.py")
	if err := os.WriteFile(script, []byte(namesServer), 0o600); err != nil {
		t.Fatal(err)
	}
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{
		MCP: []kiln.MCPServer{{Name: "names", Command: []string{"python3", script}}}})
	if err != nil {
		t.Fatalf("a server with one tool named past the bound: %v; want the workbench open", err)
	}
	defer wb.Close()
	for _, c := range []struct{ code, want string }{
		{"await tools.names.été()", "'été'"},
		{"len(await tools.names." + strings.Repeat("y", 128) + "())", "128"},
		{"hasattr(tools.names, " + strconv.Quote(strings.Repeat("x", 129)) + ")", "False"},
	} {
		rec, err := wb.Execute(context.Background(), c.code)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(rec); got != c.want {
			t.Errorf("%.60s:\ngot %s %q %v; want %q", c.code, rec.Status, got, rec.Error, c.want)
		}
	}
}

// TestOneCallingConventionInCellsAndPrograms: a tool takes keyword arguments, or one dict
// of them, in a cell and in a program alike; both at once is a TypeError in each.
func TestOneCallingConventionInCellsAndPrograms(t *testing.T) {
	t.Parallel()
	ts, err := kiln.OpenToolset(context.Background(), kiln.ToolsetOptions{Tools: calcTools(make(chan struct{}, 1))})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	const calls = `out = [await calc.add(a=1, b=2), await calc.add({"a": 3, "b": 4})]
for bad in (lambda: calc.add({"a": 1}, b=2), lambda: calc.add({"a": 1}, {"b": 2})):
    try:
        await bad()
    except TypeError as e:
        out.append("takes keyword arguments" in str(e))
`
	res, err := kiln.Run(context.Background(), kiln.Program{Namespaces: ts.Namespaces(), Source: calls + "return out"})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"sum":3},{"sum":7},true,true]`
	if got := encoded(t, res.Value); res.Status != kiln.RunOK || got != want {
		t.Errorf("in a program: %s %s %s; want %s", res.Status, got, res.Error, want)
	}
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{Tools: calcTools(make(chan struct{}, 1))})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	rec, err := wb.Execute(context.Background(), "calc = tools.calc\n"+calls+"out")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(rec), "[{'sum': 3}, {'sum': 7}, True, True]"; got != want {
		t.Errorf("in a cell: %s %q %v; want %q", rec.Status, got, rec.Error, want)
	}
}
