package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/scratch"
	"github.com/kilnrt/kiln/internal/wire"
)

// realPython is the interpreter python3 runs, resolved once: the binary itself, not a
// version manager's shim, which on a loaded machine can take the start timeout alone.
var realPython = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("python3", "-I", "-S", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("resolving python3: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// startWorker starts a generation with real python3 and ends it with the test.
func startWorker(t *testing.T, cfg Config) *Worker {
	t.Helper()
	if cfg.Python == "" {
		python, err := realPython()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Python = python
	}
	if cfg.SessionID == "" {
		cfg.SessionID = "test"
	}
	if cfg.Generation == "" {
		cfg.Generation = "g-1"
	}
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Shutdown(time.Second) })
	return w
}

func execute(t *testing.T, w *Worker, id, code string) Record {
	t.Helper()
	rec, err := w.Execute(context.Background(), id, code)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return rec
}

// readyLine is what a cell prints, flushed, once it has reached the point a test waits
// for: startReady's readiness signal.
const readyLine = "print('ready', flush=True)\n"

// startReady runs code as cell id in the background and returns once the cell has
// printed readyLine's line, with the channel its record comes on.
func startReady(tb testing.TB, w *Worker, id, code string) <-chan Record {
	tb.Helper()
	ready, done := make(chan struct{}), make(chan Record, 1)
	go func() {
		rec, err := w.ExecuteStream(context.Background(), id, code, func(o wire.Output) {
			if o.Text == "ready\n" {
				close(ready)
			}
		})
		if err != nil {
			tb.Errorf("Execute(%q): %v", code, err)
		}
		done <- rec
	}()
	select {
	case <-ready:
	case rec := <-done:
		tb.Fatalf("cell %s ended before it was ready: %s %q", id, rec.Status, errText(rec))
	case <-time.After(30 * time.Second): // a hang's bound, not a timing claim
		tb.Fatalf("cell %s was not ready within 30s", id)
	}
	return done
}

func result(rec Record) string {
	var parts []string
	for _, o := range rec.Output {
		if o.Stream == wire.StreamResult {
			parts = append(parts, o.Text)
		}
	}
	return strings.Join(parts, "|")
}

func errText(rec Record) string {
	if rec.Error == nil {
		return ""
	}
	return *rec.Error
}

func TestCellsShareANamespace(t *testing.T) {
	w := startWorker(t, Config{})
	for i, c := range []struct{ code, want string }{
		{"x = 20", ""},
		{"x + 1", "21"},
		{"_ * 2", "42"},
		{"None", ""},
		{"_", "42"},
		{"from __future__ import annotations\ndef f(a: undefined_name): pass", ""},
		{"f.__annotations__", "{'a': 'undefined_name'}"},
	} {
		rec := execute(t, w, fmt.Sprintf("c-%d", i), c.code)
		if rec.Status != wire.StatusOK || result(rec) != c.want {
			t.Errorf("%q: got %s %q (%s); want ok %q", c.code, rec.Status, result(rec), errText(rec), c.want)
		}
	}
}

func TestBackgroundTaskSurvivesBetweenCells(t *testing.T) {
	w := startWorker(t, Config{})
	execute(t, w, "c-1", `import asyncio
ticks = 0
async def tick():
    global ticks
    while True:
        ticks += 1
        await asyncio.sleep(0.005)
task = asyncio.ensure_future(tick())`)
	execute(t, w, "c-2", "seen = ticks")
	rec := execute(t, w, "c-3", "await asyncio.sleep(0.1)\n(ticks > seen, task.done())")
	if result(rec) != "(True, False)" {
		t.Errorf("got %q (%s); want the task still running", result(rec), errText(rec))
	}
}

func TestErrorsShowTheCellsLines(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-7", "def f():\n    return 1 / 0\nf()")
	text := errText(rec)
	if rec.Status != wire.StatusError || !strings.Contains(text, "ZeroDivisionError") ||
		!strings.Contains(text, "return 1 / 0") || !strings.Contains(text, "<cell-c-7>") {
		t.Errorf("got %s %q", rec.Status, text)
	}
	if strings.Contains(text, "kiln/") {
		t.Errorf("traceback shows the runtime's frames: %q", text)
	}
}

// interruptCases are cells an interrupt must stop with the namespace intact.
// Each prints readyLine just before it blocks.
var interruptCases = []struct{ name, code string }{
	{"busy loop", readyLine + "while True: pass"},
	{"sleep", "import time\n" + readyLine + "time.sleep(1e9)"},
	{"blocking select", "import select\n" + readyLine + "select.select([], [], [], 1e9)"},
	{"slow repr", "import time\nclass Slow:\n    def __repr__(self):\n        " + readyLine + "        time.sleep(1e9)\nSlow()"},
	{"await", "import asyncio\n" + readyLine + "await asyncio.sleep(1e9)"},
	{"await an event", "import asyncio\n" + readyLine + "await asyncio.Event().wait()"},
	{"background task hogging the loop", "import asyncio\nasync def hog():\n    " + readyLine + "    while True: pass\n" +
		"hogger = asyncio.ensure_future(hog())\nawait asyncio.sleep(1e9)"},
}

func TestInterruptStopsTheCellAndKeepsTheNamespace(t *testing.T) {
	w := startWorker(t, Config{})
	execute(t, w, "setup", "x = 20")
	for i, c := range interruptCases {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("i-%d", i)
			done := startReady(t, w, id, c.code)
			sent := time.Now()
			if err := w.Interrupt(id); err != nil {
				t.Fatal(err)
			}
			rec := <-done
			t.Logf("ended %s after the interrupt", time.Since(sent))
			if rec.Status != wire.StatusInterrupted || rec.NamespaceLost {
				t.Errorf("got %s lost=%v (%s); want interrupted with the namespace kept", rec.Status, rec.NamespaceLost, errText(rec))
			}
			if rec := execute(t, w, id+"-after", "x"); result(rec) != "20" {
				t.Errorf("after the interrupt x is %q (%s)", result(rec), errText(rec))
			}
		})
	}
}

func TestCancellingTheContextInterrupts(t *testing.T) {
	w := startWorker(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	rec, err := w.Execute(ctx, "c-1", "while True: pass")
	if err != nil || rec.Status != wire.StatusInterrupted {
		t.Fatalf("got %v %s; want interrupted", err, rec.Status)
	}
}

func TestInterruptRacingTheStartStillApplies(t *testing.T) {
	w := startWorker(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the interrupt follows the execute frame at once
	rec, err := w.Execute(ctx, "c-1", "x = 1\nwhile True: pass")
	if err != nil || rec.Status != wire.StatusInterrupted || rec.NamespaceLost {
		t.Fatalf("got %v %s lost=%v; want interrupted", err, rec.Status, rec.NamespaceLost)
	}
	if rec := execute(t, w, "c-2", "1 + 1"); result(rec) != "2" {
		t.Errorf("next cell: %q", result(rec))
	}
}

func TestIgnoredInterruptIsHardStopped(t *testing.T) {
	grace := 500 * time.Millisecond
	w := startWorker(t, Config{InterruptGrace: grace})
	execute(t, w, "c-1", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)")
	done := startReady(t, w, "c-2", readyLine+"while True: pass")
	sent := time.Now()
	w.Interrupt("c-2")
	rec := <-done
	t.Logf("hard stop %s after the interrupt (grace %s)", time.Since(sent), grace)
	if rec.Status != wire.StatusInterrupted || !rec.NamespaceLost || !strings.Contains(errText(rec), "lost") {
		t.Errorf("got %s lost=%v %q", rec.Status, rec.NamespaceLost, errText(rec))
	}
	<-w.Done()
	if !errors.Is(w.Err(), ErrInterruptTimeout) {
		t.Errorf("generation ended with %v", w.Err())
	}
	if _, err := w.Execute(context.Background(), "c-3", "1"); !errors.Is(err, ErrDead) {
		t.Errorf("Execute on the ended generation: %v; want ErrDead", err)
	}
}

func TestKilledWorkerGivesAHostMadeRecord(t *testing.T) {
	w := startWorker(t, Config{})
	done := startReady(t, w, "c-1", "import time\n"+readyLine+"time.sleep(100)")
	killed := time.Now()
	syscall.Kill(w.Pid(), syscall.SIGKILL)
	rec := <-done
	t.Logf("record %s after the kill", time.Since(killed))
	if rec.Status != StatusFailed || !rec.NamespaceLost || !strings.Contains(errText(rec), "killed") {
		t.Errorf("got %s lost=%v %q", rec.Status, rec.NamespaceLost, errText(rec))
	}
}

func TestOutputIsBoundedAndCounted(t *testing.T) {
	w := startWorker(t, Config{})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := execute(t, w, "c-1", "print('x' * 100_000_000)")
	runtime.ReadMemStats(&after)
	total := 0
	for _, o := range rec.Output {
		total += len(o.Text)
	}
	if rec.Status != wire.StatusOK || total != wire.MaxOutputBytes || rec.TruncatedBytes != 100_000_001-wire.MaxOutputBytes {
		t.Errorf("got %s, %d bytes kept, %d truncated; want %d kept, %d truncated",
			rec.Status, total, rec.TruncatedBytes, wire.MaxOutputBytes, 100_000_001-wire.MaxOutputBytes)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("the host allocated %d bytes for one bounded cell", grew)
	}
}

func TestOversizeSourceIsRefusedBeforeItRuns(t *testing.T) {
	w := startWorker(t, Config{})
	code := "x = 1\n#" + strings.Repeat("-", wire.MaxCodeBytes)
	rec := execute(t, w, "c-1", code)
	if rec.Status != wire.StatusError || !rec.NotRun || !strings.Contains(errText(rec), "262144") {
		t.Errorf("got %s (not run: %v) %q", rec.Status, rec.NotRun, errText(rec))
	}
	if rec := execute(t, w, "c-2", "'x' in globals()"); result(rec) != "False" {
		t.Errorf("the refused cell ran: %q", result(rec))
	}
	atLimit := "x = 1\n#" + strings.Repeat("-", wire.MaxCodeBytes-len("x = 1\n#"))
	if rec := execute(t, w, "c-3", atLimit); rec.Status != wire.StatusOK || rec.NotRun {
		t.Errorf("a cell of exactly %d bytes: %s %q", wire.MaxCodeBytes, rec.Status, errText(rec))
	}
}

func TestTheTokenIsNotVisibleToCells(t *testing.T) {
	w := startWorker(t, Config{})
	rec := execute(t, w, "c-1", "import os, sys\nrepr((dict(os.environ), sys.argv, sys.stdin.read()))")
	if regexp.MustCompile(`[0-9a-f]{64}`).MatchString(result(rec)) {
		t.Errorf("a cell can see a token: %s", result(rec))
	}
}

// TestOneForegroundOperation holds the first cell at a host request while a second
// Execute is tried.
func TestOneForegroundOperation(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	w := startWorker(t, Config{Handler: HandlerFunc(func(ctx context.Context, call Call) wire.Reply {
		close(held)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return wire.Reply{Kind: wire.ReplyOK}
	})})
	done := make(chan Record, 1)
	go func() { done <- execute(t, w, "c-1", "await runtime.request('hold')") }()
	<-held
	if _, err := w.Execute(context.Background(), "c-2", "1"); !errors.Is(err, ErrBusy) {
		t.Errorf("second Execute: %v; want ErrBusy", err)
	}
	close(release)
	if rec := <-done; rec.Status != wire.StatusOK {
		t.Errorf("first cell: %s", rec.Status)
	}
}

func TestHostRequests(t *testing.T) {
	handler := HandlerFunc(func(ctx context.Context, call Call) wire.Reply {
		if call.Method != "echo" {
			return UnknownMethod(call.Method)
		}
		var req map[string]jsontext.Value
		json.Unmarshal(call.Request, &req)
		return wire.Reply{Kind: wire.ReplyOK, Value: req["value"]}
	})
	w := startWorker(t, Config{Handler: handler})
	for _, c := range []struct{ code, want string }{
		{"await runtime.request('echo', value={'a': [1, 2]})", "{'a': [1, 2]}"},
		{"from kiln.runtime import HostError\ntry:\n    await runtime.request('nope')\nexcept HostError as e:\n    r = (e.code, e.message)\nr",
			`('unknown_method', 'the host has no method "nope"')`},
		{"import asyncio\nlen(await asyncio.gather(*[runtime.request('echo', value=i) for i in range(100)]))", "100"},
	} {
		rec := execute(t, w, "c-1", c.code)
		if result(rec) != c.want {
			t.Errorf("%q: got %q (%s); want %q", c.code, result(rec), errText(rec), c.want)
		}
	}
}

// TestAFloodOfRequestsEndsTheGeneration has a cell go on making requests after each is
// refused, and a task go on after its cell ended: past MaxRequestFrames, each ends its
// generation, before its requests fill the record.
func TestAFloodOfRequestsEndsTheGeneration(t *testing.T) {
	var served atomic.Int64
	refuse := HandlerFunc(func(ctx context.Context, call Call) wire.Reply {
		served.Add(1)
		return UnknownMethod(call.Method)
	})
	loop := func(n int) string {
		return fmt.Sprintf("for _ in range(%d):\n    try:\n        await runtime.request('nope')\n    except Exception:\n        pass", n)
	}
	for name, tc := range map[string]struct {
		code string
		most int64
	}{
		"a cell at the bound": {"import asyncio\n" + loop(MaxRequestFrames), -1},
		"a cell":              {"import asyncio\n" + loop(MaxRequestFrames+1), MaxRequestFrames},
		"a task after its cell": {"import asyncio\nasync def go():\n    " + strings.ReplaceAll(loop(MaxStrayRequestFrames+1), "\n", "\n    ") +
			"\nasyncio.ensure_future(go())", MaxStrayRequestFrames},
	} {
		code := tc.code
		t.Run(name, func(t *testing.T) {
			served.Store(0)
			w := startWorker(t, Config{Handler: refuse})
			rec, err := w.Execute(context.Background(), "c-1", code)
			if tc.most < 0 { // within the bound: every request served, the generation lives
				if err != nil || rec.Status != wire.StatusOK || w.Err() != nil || served.Load() != MaxRequestFrames {
					t.Errorf("got %s %v, worker %v, %d served; want ok, all %d served", rec.Status, err, w.Err(), served.Load(), MaxRequestFrames)
				}
				return
			}
			select {
			case <-w.Done():
			case <-time.After(time.Minute):
				t.Fatalf("the generation still ran a minute after %d requests", served.Load())
			}
			if !errors.Is(w.Err(), ErrRequestFlood) || served.Load() > tc.most {
				t.Errorf("generation ended with %v after %d requests served; want ErrRequestFlood after at most %d", w.Err(), served.Load(), tc.most)
			}
		})
	}
}

func TestCallsSayWhetherTheirCellIsLive(t *testing.T) {
	type seen struct {
		call  Call
		ended bool
	}
	calls := make(chan seen, 4)
	w := startWorker(t, Config{Handler: HandlerFunc(func(ctx context.Context, call Call) wire.Reply {
		calls <- seen{call, ctx.Err() != nil}
		return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value("1")}
	})})
	execute(t, w, "c-1", `import asyncio
c1_ended = asyncio.Event()
async def later():
    await c1_ended.wait()
    return await runtime.request("one")
await runtime.request("one")
pending = asyncio.ensure_future(later())`)
	execute(t, w, "c-2", "c1_ended.set()\nawait pending")
	for i, want := range []struct {
		exec, method string
		live         bool
	}{{"c-1", "one", true}, {"c-1", "one", false}} {
		got := <-calls
		if got.call.ExecutionID != want.exec || got.call.Method != want.method || got.call.Live != want.live ||
			got.ended == want.live || got.call.Generation != "g-1" {
			t.Errorf("call %d: got %+v (ctx ended %v); want %s %s live=%v", i, got.call, got.ended, want.exec, want.method, want.live)
		}
	}
}

func TestShutdownEndsTheProcess(t *testing.T) {
	w := startWorker(t, Config{})
	pid := w.Pid()
	if err := w.Shutdown(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("worker %d still exists", pid)
	}
	if !errors.Is(w.Err(), ErrClosed) {
		t.Errorf("Err() = %v; want ErrClosed", w.Err())
	}
}

// fakeInterpreter writes an executable that stands in for python3 and runs script
// with the real python3, so a test can make a worker misbehave on the wire.
func fakeInterpreter(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	py := filepath.Join(dir, "forge.py")
	if err := os.WriteFile(py, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(dir, "python3")
	body := fmt.Sprintf("#!/bin/sh\nexec python3 -I %s \"$@\"\n", py)
	if err := os.WriteFile(sh, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return sh
}

// forgePrelude connects as a worker would; the script is handed the launcher's argv.
const forgePrelude = `import json, socket, struct, sys
args = sys.argv[sys.argv.index("--socket"):]
opts = dict(zip(args[::2], args[1::2]))
token = sys.stdin.readline().strip()
s = socket.socket(socket.AF_UNIX); s.connect(opts["--socket"])
def send(message, generation=opts["--generation"]):
    body = json.dumps({"version": 1, "session_id": opts["--session"], "generation": generation, "message": message}).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
def hello(tok=None):
    send({"kind": "hello", "token": tok or token, "role": "workbench", "revision": None, "slots": []})
`

func TestHandshakeFailures(t *testing.T) {
	// Each forger but the silent one is refused as soon as it speaks or exits: its
	// timeout only bounds a loaded machine's start. The silent one meets its timeout,
	// which must leave a loaded machine time to start python and connect (up to 2 s
	// seen on a shared 2-core machine), for the hello to be what is missing.
	for _, c := range []struct{ name, script, want string }{
		{"dies before hello", "import sys\nsys.stderr.write('no interpreter today\\n')\nsys.exit(3)", "no interpreter today"},
		{"wrong token", forgePrelude + "hello('0' * 64)\nimport time; time.sleep(60)", "wrong token"},
		{"old generation", forgePrelude + "send({'kind': 'hello', 'token': token, 'role': 'workbench', 'revision': None, 'slots': []}, generation='g-0')\nimport time; time.sleep(60)", "mismatch"},
		{"hooks role", forgePrelude + "send({'kind': 'hello', 'token': token, 'role': 'hooks', 'revision': None, 'slots': []})\nimport time; time.sleep(60)", "want workbench"},
		{"silent", forgePrelude + "import time; time.sleep(60)", "hello"},
		{"a revision with no skills given", forgePrelude + "send({'kind': 'hello', 'token': token, 'role': 'workbench', 'revision': 'r1', 'slots': []})\nimport time; time.sleep(60)", "no skills were given"},
	} {
		t.Run(c.name, func(t *testing.T) {
			timeout := 30 * time.Second
			if c.name == "silent" {
				timeout = 5 * time.Second
			}
			_, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1",
				Python: fakeInterpreter(t, c.script), StartTimeout: timeout})
			if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v; want ErrStart mentioning %q", err, c.want)
			}
		})
	}
}

func TestSkillsAreLoadedBeforeTheHelloAndTheirFileIsGone(t *testing.T) {
	payload := []byte(`{"revision":"abc123","skills":[{"id":"deploy","body":"# deploy\nShip it.\n"},{"id":"a-b","body":"# a-b\n"}]}`)
	w := startWorker(t, Config{Skills: payload, SkillsRevision: "abc123"})
	if r := w.Revision(); r == nil || *r != "abc123" {
		t.Errorf("hello revision %v", r)
	}
	if _, err := os.Stat(filepath.Join(w.dir, "skills.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the skills file outlived the handshake: %v", err)
	}
	rec := execute(t, w, "c-1", "import importlib, kiln.skills.deploy\n"+
		"kiln.skills.deploy.__doc__, importlib.import_module('kiln.skills.a-b').__doc__, kiln.skills.revision")
	if got := result(rec); got != `('# deploy\nShip it.\n', '# a-b\n', 'abc123')` {
		t.Errorf("got %s %+v", got, rec)
	}

	plain := startWorker(t, Config{})
	if plain.Revision() != nil {
		t.Errorf("a worker given no skills echoed %q", *plain.Revision())
	}
}

func TestAHelloWithAnotherRevisionIsRefused(t *testing.T) {
	_, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1",
		Skills: []byte(`{"revision":"loaded","skills":[]}`), SkillsRevision: "expected"})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "not the revision given") {
		t.Errorf("got %v; want a refused handshake", err)
	}
	_, err = Start(context.Background(), Config{SessionID: "s", Generation: "g-1",
		Skills: []byte(`{"revision":"r","skills":[{"id":"x"}]}`), SkillsRevision: "r"})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "skills file is malformed") {
		t.Errorf("got %v; want the malformed file named", err)
	}
}

func TestProtocolBreachesInvalidateTheGeneration(t *testing.T) {
	for _, c := range []struct{ name, after, want string }{
		{"frame from an old generation", "send({'kind': 'completed', 'id': 'c-1', 'result': {'kind': 'failed', 'error': 'x'}}, generation='g-0')", "mismatch"},
		{"bad framing", "s.sendall(struct.pack('>I', 0))", "frame length"},
		{"partial payload, then the stream ends", "s.sendall(struct.pack('>I', 100) + b'{')\ns.shutdown(socket.SHUT_WR)", "stream ended inside a frame"},
		{"unknown completion", "send({'kind': 'completed', 'id': 'other', 'result': {'kind': 'failed', 'error': 'x'}})", "not running"},
		{"host-only kind", "send({'kind': 'execute', 'id': 'c-9', 'code': ''})", "only the host sends"},
	} {
		t.Run(c.name, func(t *testing.T) {
			script := forgePrelude + "hello()\n" + "s.recv(65536)\n" + c.after + "\nimport time; time.sleep(5)"
			w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1", Python: fakeInterpreter(t, script)})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := w.Execute(context.Background(), "c-1", "1")
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != StatusFailed || !rec.NamespaceLost || !strings.Contains(errText(rec), c.want) {
				t.Errorf("got %s lost=%v %q; want failed mentioning %q", rec.Status, rec.NamespaceLost, errText(rec), c.want)
			}
			<-w.Done()
		})
	}
}

func TestTransitions(t *testing.T) {
	all := []State{Starting, Idle, Busy, Stopping, Dead}
	allowed := map[[2]State]bool{
		{Starting, Idle}: true, {Starting, Dead}: true,
		{Idle, Busy}: true, {Idle, Stopping}: true, {Idle, Dead}: true,
		{Busy, Idle}: true, {Busy, Stopping}: true, {Busy, Dead}: true,
		{Stopping, Dead}: true,
	}
	for _, from := range all {
		for _, to := range all {
			err := checkTransition(from, to)
			if got := err == nil; got != allowed[[2]State{from, to}] {
				t.Errorf("%s → %s: got %v; want allowed=%v", from, to, err, allowed[[2]State{from, to}])
			}
			want := ErrIllegalTransition
			if from == Busy && to == Busy {
				want = ErrBusy
			}
			if err != nil && !errors.Is(err, want) {
				t.Errorf("%s → %s: %v is not %v", from, to, err, want)
			}
		}
	}
}

// TestALargeReplyToABusyCellsTaskNeitherBlocksItsInterruptNorEndsTheGeneration: the
// worker reads nothing while its cell's code runs, so a reply bigger than the socket's
// buffer waits for it; an interrupt still stops the cell, and the reply still arrives.
func TestALargeReplyToABusyCellsTaskNeitherBlocksItsInterruptNorEndsTheGeneration(t *testing.T) {
	big := `"` + strings.Repeat("a", 700_000) + `"`
	w := startWorker(t, Config{Handler: HandlerFunc(func(context.Context, Call) wire.Reply {
		return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value(big)}
	})})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec, err := w.ExecuteStream(ctx, "c-1", "import asyncio, time\n"+
		"t = asyncio.create_task(runtime.request('big'))\n"+
		"await asyncio.sleep(0.1)\n"+
		readyLine+
		"time.sleep(60)", func(o wire.Output) {
		if o.Text == "ready\n" {
			cancel()
		}
	})
	if err != nil || rec.Status != wire.StatusInterrupted || rec.NamespaceLost {
		t.Fatalf("got %v %+v; want interrupted, namespace kept", err, rec)
	}
	if got := result(execute(t, w, "c-2", "len(await t)")); got != "700000" {
		t.Errorf("the task's reply: %s", got)
	}
}

// bigAtOnce answers "big" on the reader with a value too large for the socket to take at
// once, after the worker's polling window, and anything else on a goroutine of its own.
type bigAtOnce struct{}

func (bigAtOnce) Serve(_ context.Context, call Call) wire.Reply {
	if call.Method == "big" {
		time.Sleep(2 * time.Millisecond)
		return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value(`"` + strings.Repeat("x", 900_000) + `"`)}
	}
	return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value("1")}
}

func (bigAtOnce) Immediate(method string) bool { return method == "big" }

// The reader writes large immediate replies while the worker writes a large request:
// neither waits for the other to read, nor a second reply for the first.
func TestLargeImmediateRepliesDoNotHoldUpTheReader(t *testing.T) {
	for _, c := range []struct{ name, code, want string }{
		{"one", `t = asyncio.ensure_future(runtime.request("big"))
await asyncio.sleep(0.001)
await runtime.request("sink", data="y" * 900000)
len(await t)`, "900000"},
		{"two in a row", `t1 = asyncio.ensure_future(runtime.request("big"))
t2 = asyncio.ensure_future(runtime.request("big"))
await asyncio.sleep(0.001)
time.sleep(0.05)
await runtime.request("sink", data="y" * 900000)
len(await t1) + len(await t2)`, "1800000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1", Handler: bigAtOnce{}})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Shutdown(time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a deadlock's bound, not a timing claim
			defer cancel()
			rec, err := w.Execute(ctx, "c-1", "import asyncio, time\n"+c.code)
			if err != nil || rec.Status != wire.StatusOK || len(rec.Output) != 1 || rec.Output[0].Text != c.want {
				t.Errorf("got %+v %v; want %s", rec, err, c.want)
			}
		})
	}
}

// Shutdown waits no longer than its grace, even for a frame queued behind a large reply a
// busy cell does not read.
func TestShutdownIsBoundedBehindALargeReply(t *testing.T) {
	w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1", Handler: bigAtOnce{}})
	if err != nil {
		t.Fatal(err)
	}
	// The request precedes the line on the socket: the reader has answered it.
	startReady(t, w, "c-1", `import asyncio
t1 = asyncio.ensure_future(runtime.request("big"))
await asyncio.sleep(0.01)
`+readyLine+`while True: pass`)
	done := make(chan struct{})
	go func() { w.Shutdown(time.Second); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // grace 1 s; the bound only tells a hang from an end
		t.Error("Shutdown(1s) did not return")
		w.invalidate(ErrClosed)
	}
}

// notJSON answers every request at once with a value that is not JSON: a service's bug.
type notJSON struct{}

func (notJSON) Serve(context.Context, Call) wire.Reply {
	return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value("{")}
}

func (notJSON) Immediate(string) bool { return true }

func TestAReplyTheHostCannotEncodeAnswersHostFailed(t *testing.T) {
	w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1", Handler: notJSON{}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(time.Second)
	rec, err := w.Execute(context.Background(), "c-1", `from kiln.runtime import HostError
try:
    await runtime.request("x")
except HostError as e:
    r = e.code
r`)
	if err != nil || rec.Status != wire.StatusOK || rec.Output[0].Text != "'"+CodeHostFailed+"'" || w.Err() != nil {
		t.Errorf("got %+v %v, worker %v; want %s", rec, err, w.Err(), CodeHostFailed)
	}
}

// sized answers "sized" at once with a string of the request's n x's.
type sized struct{}

func (sized) Serve(_ context.Context, call Call) wire.Reply {
	var params struct {
		N int `json:"n"`
	}
	json.Unmarshal(call.Request, &params)
	return wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value(`"` + strings.Repeat("x", params.N) + `"`)}
}

func (sized) Immediate(string) bool { return true }

// A reply whose frame is exactly the largest a frame may be is delivered; one a byte
// larger cannot be framed, and the cell is answered host_failed, its generation intact.
func TestAReplyAtTheFrameLimitAndOnePast(t *testing.T) {
	empty, err := wire.Encode(wire.Envelope{SessionID: "s", Generation: "g-1", Message: wire.HostReply{
		ID: "r-1", ExecutionID: "c-1", Reply: wire.Reply{Kind: wire.ReplyOK, Value: jsontext.Value(`""`)}}})
	if err != nil {
		t.Fatal(err)
	}
	atLimit := wire.MaxFrameSize - len(empty) // x's that make the payload MaxFrameSize bytes
	w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1", Handler: sized{}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(time.Second)
	rec, err := w.Execute(context.Background(), "c-1", fmt.Sprintf(`from kiln.runtime import HostError
a = len(await runtime.request("sized", n=%d))
try:
    await runtime.request("sized", n=%d)
except HostError as e:
    b = e.code
a, b`, atLimit, atLimit+1))
	want := fmt.Sprintf("(%d, '%s')", atLimit, CodeHostFailed)
	if err != nil || rec.Status != wire.StatusOK || rec.Output[0].Text != want || w.Err() != nil {
		t.Errorf("got %+v %v, worker %v; want %s", rec, err, w.Err(), want)
	}
}

// A cell's background tasks flooding the host with requests do not stall the next
// cell's execute: the reader keeps reading while the writer waits for the worker to read
// (which it does once its own writes are taken), and no lock is held across either.
func TestRequestsFromBackgroundTasksDoNotStallALargeExecute(t *testing.T) {
	w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1", Handler: answerOne{}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(time.Second)
	rec, err := w.Execute(context.Background(), "c-1", `import asyncio
async def flood():
    for _ in range(20):
        await runtime.request("x", data="y" * 20000)
tasks = [asyncio.ensure_future(flood()) for _ in range(16)]`)
	if err != nil || rec.Status != wire.StatusOK {
		t.Fatalf("got %+v %v", rec, err)
	}
	big := "x = '" + strings.Repeat("a", 250_000) + "'\nlen(x)"
	rec, err = w.Execute(context.Background(), "c-2", big)
	if err != nil || rec.Status != wire.StatusOK || rec.Output[0].Text != "250000" || w.Err() != nil {
		t.Fatalf("got %+v %v, worker %v; want 250000 in the same generation", rec, err, w.Err())
	}
	rec, err = w.Execute(context.Background(), "c-3", "await asyncio.gather(*tasks); 'done'")
	if err != nil || rec.Status != wire.StatusOK || rec.Output[0].Text != "'done'" {
		t.Errorf("got %+v %v; want the tasks done", rec, err)
	}
}

// A child that cell code forks, and that returns from the cell, never speaks on the
// worker's socket: no second completion of its cell reaches the host, and a request it
// tries fails in the child alone.
func TestAForkedChildNeverSpeaksOnTheSocket(t *testing.T) {
	w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1", Handler: answerOne{}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(time.Second)
	for i, c := range []struct{ code, want string }{
		{"import os\npid = os.fork()\nif pid == 0:\n    x = 1", ""},
		// The child has ended, and said what it would have, before this cell completes.
		{"os.waitpid(pid, 0)[1]", "0"},
		{"pid = os.fork()\nif pid == 0:\n    await runtime.request('x')", ""},
		{"os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])", "1"},
		{"await runtime.request('x')", "1"},
	} {
		rec, err := w.Execute(context.Background(), fmt.Sprintf("c-%d", i+1), c.code)
		if err != nil || rec.Status != wire.StatusOK || w.Err() != nil {
			t.Fatalf("cell %d: got %+v %v, worker %v; want ok in the same generation", i+1, rec, err, w.Err())
		}
		if c.want != "" && (len(rec.Output) != 1 || rec.Output[0].Text != c.want) {
			t.Errorf("cell %d: output %+v; want %s", i+1, rec.Output, c.want)
		}
	}
}

// A cell the host cannot send is refused with a record, and leaves the generation idle.
func TestACellTheHostCannotSendIsRefusedAndTheGenerationServesOn(t *testing.T) {
	w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown(time.Second)
	for i, c := range []struct{ code, want string }{
		{"x = \"\xff\"", "offset 5 (0xff)"},
		{"x = 1 # \xe2\x82", "offset 8 (0xe2)"},
		// Within the source limit, but past the frame's once each byte is escaped.
		{strings.Repeat("\x01", wire.MaxCodeBytes), "frame length out of range"},
	} {
		rec, err := w.Execute(context.Background(), fmt.Sprintf("c-%d", i+1), c.code)
		if err != nil || rec.Status != wire.StatusError || !rec.NotRun || rec.Error == nil || !strings.Contains(*rec.Error, c.want) {
			t.Errorf("cell %d: got %+v %v; want an error record, not run, naming %q", i+1, rec, err, c.want)
		}
		if w.State() != Idle {
			t.Errorf("cell %d: the generation is %s; want idle", i+1, w.State())
		}
	}
	rec, err := w.Execute(context.Background(), "c-9", "1+1")
	if err != nil || rec.NotRun || rec.Output[0].Text != "2" {
		t.Errorf("next cell: %+v %v; want 2", rec, err)
	}
}

// Shutdown returns once the generation's directory, named for this host, is gone.
func TestGenerationDirectories(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	w, err := Start(context.Background(), Config{SessionID: "s", Generation: "g-1"})
	if err != nil {
		t.Fatal(err)
	}
	dir := w.dir
	if owner, ok := scratch.Owner(filepath.Base(dir)); !ok || owner != os.Getpid() {
		t.Errorf("directory %s names owner %d, %v; want this process", dir, owner, ok)
	}
	w.Shutdown(time.Second)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after Shutdown, %s: %v; want it gone", dir, err)
	}
}
