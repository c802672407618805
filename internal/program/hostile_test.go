package program

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/python"
)

// The tests in this file forge frames from inside the program, which has fd 3, as a
// hostile program may: each shows that the host drops or tames the forgery and that
// the program's own completion comes through.

// forgeHelper is Python that defines forge(data): write data whole to fd 3, which the
// child keeps non-blocking.
const forgeHelper = `import os, select
def forge(data):
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(3, view):]
        except BlockingIOError:
            select.select([], [3], [])
`

// TestHostileFramesLeaveTheCompletionIntact forges one kind of junk per case, then
// completes with "mine"; every forgery is dropped and counted.
func TestHostileFramesLeaveTheCompletionIntact(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	tests := []struct {
		name    string
		forge   string // Python bytes literal(s) written to fd 3
		dropped int
		logs    string // the logs, joined by |
	}{
		{"non-JSON line", `b'this is not json\n'`, 1, ""},
		{"truncated JSON", `b'{"type":"log","text":"x"\n'`, 1, ""},
		{"not an object", `b'["log","x"]\n'`, 1, ""},
		{"unknown type", `b'{"type":"shutdown"}\n'`, 1, ""},
		{"no type", `b'{"text":"x"}\n'`, 1, ""},
		{"done error message a number", `b'{"type":"done","error":{"kind":"exception","message":5}}\n'`, 1, ""},
		{"done error of an unknown kind", `b'{"type":"done","error":{"kind":"timeout","message":"x"}}\n'`, 1, ""},
		{"done error null", `b'{"type":"done","error":null}\n'`, 1, ""},
		{"0xFF byte", `b'{"type":"log","text":"\xff"}\n'`, 1, ""},
		{"0xFF byte outside a string", `b'{"type":"log","text":"x"}\xff\n'`, 1, ""},
		{"unsafe integer in done", `b'{"type":"done","value":9007199254740993}\n'`, 1, ""},
		{"unsafe integer in a call", `b'{"type":"call","id":0,"global":"tools","name":"count","args":[9007199254740993]}\n'`, 1, ""},
		{"call id a string", `b'{"type":"call","id":"0","global":"tools","name":"count","args":null}\n'`, 1, ""},
		{"call id -0", `b'{"type":"call","id":-0,"global":"tools","name":"count","args":null}\n'`, 1, ""},
		{"call id 1e400", `b'{"type":"call","id":1e400,"global":"tools","name":"count","args":null}\n'`, 1, ""},
		{"call without args", `b'{"type":"call","id":0,"global":"tools","name":"count"}\n'`, 1, ""},
		{"call args not lossless", `b'{"type":"call","id":0,"global":"tools","name":"count","args":[-0.0]}\n'`, 1, ""},
		{"call id out of turn", `b'{"type":"call","id":7,"global":"tools","name":"count","args":null}\n'`, 1, ""},
		{"log text not a string", `b'{"type":"log","text":5}\n'`, 1, ""},
		{"empty lines", `b'\n\n   \n'`, 0, ""},
		{"truncated yes is kept as text", `b'{"type":"log","text":"forged","truncated":"yes","open":1}\n'`, 0, "forged"},
		{"extra fields do not ride along", `b'{"type":"log","text":"plain","evil":{"x":[1]},"open":false}\n'`, 0, "plain"},
		{"second boot-ack", `b'{"type":"boot-ack"}\n'`, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := &toolbox{}
			res := run(t, r, tb, testLimits, forgeHelper+"forge("+tt.forge+")\nreturn 'mine'")
			wantValue(t, res, `"mine"`)
			if res.Dropped != tt.dropped {
				t.Errorf("dropped %d frames; want %d", res.Dropped, tt.dropped)
			}
			if got := strings.Join(res.Logs, "|"); got != tt.logs {
				t.Errorf("logs %q; want %q", got, tt.logs)
			}
			if n := tb.calls.Load(); n != 0 {
				t.Errorf("%d binding calls; want none", n)
			}
		})
	}
}

// TestUnsafeIntegerCallThenRealCall forges a call whose args hold 2^53+1 with the id
// the host expects: it is dropped, so the program's own call takes that id.
func TestUnsafeIntegerCallThenRealCall(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	tb := &toolbox{}
	res := run(t, r, tb, testLimits, forgeHelper+`
forge(b'{"type":"call","id":0,"global":"tools","name":"count","args":9007199254740993}\n')
return await tools.count(None)`)
	wantValue(t, res, "1")
	if res.Dropped != 1 || tb.calls.Load() != 1 {
		t.Errorf("dropped %d, calls %d; want 1 and 1", res.Dropped, tb.calls.Load())
	}
}

// TestSecondBootAckIsIgnored forges a second boot-ack and then watches fd 3: the host
// must not send run again.
func TestSecondBootAckIsIgnored(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, nil, testLimits, forgeHelper+`
forge(b'{"type":"boot-ack"}\n')
readable, _, _ = select.select([3], [], [], 0.5)
return "run sent again" if readable else "run sent once"`)
	wantValue(t, res, `"run sent once"`)
	if res.Dropped != 1 {
		t.Errorf("dropped %d; want 1", res.Dropped)
	}
}

// TestForgedDescendingCallsThenOneRealCall forges 2,000 calls with ids 2000 down to 1:
// none is the id the host expects, 0, so none is answered or invoked; the program's
// own call then is, exactly once.
func TestForgedDescendingCallsThenOneRealCall(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	tb := &toolbox{}
	res := run(t, r, tb, testLimits, forgeHelper+`
for i in range(2000, 0, -1):
    forge( b'{"type":"call","id":%d,"global":"tools","name":"count","args":null}\n' % i)
return await tools.count(None)`)
	wantValue(t, res, "1")
	if n := tb.calls.Load(); n != 1 {
		t.Errorf("%d binding invocations; want exactly 1", n)
	}
	if res.Dropped != 2000 {
		t.Errorf("dropped %d; want 2000", res.Dropped)
	}
}

// TestTwoTruncatedFramesGiveOneMarker forges the child's truncation notice twice: the
// capture stops at the first, and the logs end with exactly one marker.
func TestTwoTruncatedFramesGiveOneMarker(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	res := run(t, r, nil, testLimits, forgeHelper+`
import sys
print("before")
sys.stdout.flush()
forge(b'{"type":"log","text":"ignored","truncated":true}\n')
forge(b'{"type":"log","text":"ignored too","truncated":true}\n')
print("after")
return 'mine'`)
	wantValue(t, res, `"mine"`)
	want := []string{"before", TruncationMarker(DefaultMaxLogBytes)}
	if strings.Join(res.Logs, "|") != strings.Join(want, "|") {
		t.Errorf("logs %q; want %q", res.Logs, want)
	}
}

// TestForgedDone shows that the first valid done settles the run, and that the host
// meters a forged value as it would the child's.
func TestForgedDone(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	deep := `b'{"type":"done","value":' + b'[' * 20000 + b']' * 20000 + b'}\n'`
	tests := []struct {
		name   string
		forge  string
		status Status
		value  string
		err    string
	}{
		{"bare done is ok with null", `b'{"type":"done"}\n'`, StatusOK, "null", ""},
		{"value null", `b'{"type":"done","value":null}\n'`, StatusOK, "null", ""},
		{"duplicate type, the last wins", `b'{"type":"log","type":"done","text":"x"}\n'`, StatusOK, "null", ""},
		{"value 1e400 is invalid-output", `b'{"type":"done","value":1e400}\n'`, StatusInvalidOutput, "", "not lossless"},
		{"value -0 is invalid-output", `b'{"type":"done","value":[-0]}\n'`, StatusInvalidOutput, "", "not lossless"},
		{"20,000-deep over budget is output-limit", deep, StatusOutputLimit, "", "completion value exceeded 32768 bytes"},
		{"error wins over value", `b'{"type":"done","value":1,"error":{"kind":"exception","message":"m"}}\n'`, StatusException, "", "m"},
		{"output-limit has the host's message", `b'{"type":"done","error":{"kind":"output-limit","message":"m"}}\n'`, StatusOutputLimit, "", "completion value exceeded 32768 bytes"},
		{"forged exception", `b'{"type":"done","error":{"kind":"exception","message":"\\ud800 x"}}\n'`, StatusException, "", "\ufffd x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, r, nil, testLimits, forgeHelper+"import time\nforge("+tt.forge+")\ntime.sleep(30)\nreturn 'mine'")
			wantStatus(t, res, tt.status)
			if tt.value != "" {
				wantValue(t, res, tt.value)
			}
			if !strings.Contains(res.Error, tt.err) {
				t.Errorf("error %q; want it to hold %q", res.Error, tt.err)
			}
			if res.Wall > 20*time.Second {
				t.Errorf("the run took %v: the forged done did not settle it", res.Wall)
			}
		})
	}
}

// TestForgedDoneErrorMessageIsCapped caps a forged error message to the value budget,
// on a character boundary, with the truncation suffix inside the cap.
func TestForgedDoneErrorMessageIsCapped(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	lim := testLimits
	lim.MaxValueBytes = 100
	res := run(t, r, nil, lim, forgeHelper+`
forge(('{"type":"done","error":{"kind":"exception","message":"' + 'é' * 200 + '"}}\n').encode())`)
	wantStatus(t, res, StatusException)
	if len(res.Error) > 100 || !strings.HasSuffix(res.Error, truncatedSuffix) || !strings.HasPrefix(res.Error, "éé") {
		t.Errorf("error %q (%d bytes); want at most 100 bytes ending in %q", res.Error, len(res.Error), truncatedSuffix)
	}
}

// TestOverlongFrameIsWorkerExit writes to fd 3 without end and without a newline: the
// host stops at the frame cap and ends the run, never holding the line whole.
func TestOverlongFrameIsWorkerExit(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	start := time.Now()
	res := run(t, r, nil, testLimits, forgeHelper+`
chunk = b'x' * (1 << 20)
while True:
    forge(chunk)`)
	wantStatus(t, res, StatusWorkerExit)
	if want := fmt.Sprintf("protocol frame exceeded %d bytes on fd 3", FrameCap(testLimits.withDefaults())); res.Error != want {
		t.Errorf("error %q; want %q", res.Error, want)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestUnknownBindingReply forges a call to a binding no namespace declares and reads
// the reply from fd 3 itself, before the child's own reader runs.
func TestUnknownBindingReply(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	tb := &toolbox{}
	res := run(t, r, tb, testLimits, forgeHelper+`
import json
forge(b'{"type":"call","id":0,"global":"tools","name":"nope\\n","args":null}\n')
reply = b''
while not reply.endswith(b'\n'):
    select.select([3], [], [])
    reply += os.read(3, 65536)
return json.loads(reply)`)
	wantValue(t, res, `{"type":"reply","id":0,"ok":false,"message":"unknown binding \"tools.nope\\n\""}`)
	if tb.calls.Load() != 0 {
		t.Errorf("a binding was invoked")
	}
}

// probe is a stand-in for the kiln bootstrap that records what the host sends on
// fd 3: before its boot-ack, after it, and after a second boot-ack. It returns the
// frame types it saw as its completion.
const probe = `import json, os, select, time

def main(argv):
    buf = b""
    def frames(first, then):
        # what comes within first seconds, and then seconds past the first of it
        nonlocal buf
        end = time.monotonic() + first
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([3], [], [], left)[0]:
                break
            data = os.read(3, 65536)
            if not data:
                break
            if not buf and first != then:
                end, first = time.monotonic() + then, then
            buf += data
        lines = buf.split(b"\n")
        buf = lines.pop()
        return [json.loads(line)["type"] for line in lines if line]
    seen = {"before_ack": frames(30, 0.5)}
    os.write(3, b'{"type":"boot-ack"}\n')
    seen["after_ack"] = frames(30, 0.5)
    os.write(3, b'{"type":"boot-ack"}\n')
    seen["after_second_ack"] = frames(0.5, 0.5)
    os.write(3, b'{"type":"done","value":' + json.dumps(seen).encode() + b'}\n')
    os._exit(0)
`

// TestRunIsSentOnceOnlyAfterBootAck runs the probe in place of the bootstrap: the host
// sends boot, then nothing until boot-ack, then run once, and nothing on a second ack.
func TestRunIsSentOnceOnlyAfterBootAck(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	r.setInstaller(func() (*python.Installer, error) {
		return python.NewInstaller([]python.File{
			{Path: "kiln", Dir: true},
			{Path: "kiln/__init__.py"},
			{Path: "kiln/program.py", Data: []byte(probe)},
		}), nil
	})
	res := run(t, r, nil, testLimits, "return 1")
	wantValue(t, res, `{"before_ack":["boot"],"after_ack":["run"],"after_second_ack":[]}`)
	if res.Dropped != 1 {
		t.Errorf("dropped %d; want 1, the second boot-ack", res.Dropped)
	}
}

// TestUnreadRepliesEndTheRun forges calls whose replies are 1 MiB each and never reads
// them: once more than MaxReplyQueueBytes wait, the run ends at once as worker-exit,
// long before its wall clock.
func TestUnreadRepliesEndTheRun(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	big := lossless.String(strings.Repeat("x", 1<<20))
	ns := Namespace{Global: "tools", Funcs: map[string]Func{
		"big": func(context.Context, lossless.Value) (lossless.Value, error) { return big, nil },
	}}
	n := MaxReplyQueueBytes>>20 + 32 // more than the queue and the socket's buffers hold
	lim := testLimits
	lim.Wall = 60 * time.Second
	res, err := r.Run(context.Background(), Program{Namespaces: []Namespace{ns}, Limits: lim, Source: forgeHelper + fmt.Sprintf(`
import time
for i in range(%d):
    forge(b'{"type":"call","id":%%d,"global":"tools","name":"big","args":null}\n' %% i)
time.sleep(60)
`, n)})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, StatusWorkerExit)
	if !strings.Contains(res.Error, "reply queue exceeded") {
		t.Errorf("error %q; want the reply queue exceeded", res.Error)
	}
	if res.Wall > lim.Wall/2 {
		t.Errorf("the run took %v; want it ended as soon as the queue was full", res.Wall)
	}
}

// TestFrameAtTheCap forges one frame of exactly the frame cap, which is read, and one
// a byte past it, which ends the run.
func TestFrameAtTheCap(t *testing.T) {
	t.Parallel()
	r := newRunner(t, Options{})
	limit := FrameCap(testLimits.withDefaults())
	for _, tc := range []struct {
		size int
		want Status
	}{{limit, StatusOK}, {limit + 1, StatusWorkerExit}} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			t.Parallel()
			res := run(t, r, nil, testLimits, forgeHelper+fmt.Sprintf(`
frame = b'{"type":"nothing"}'
forge(frame + b' ' * (%d - len(frame)) + b'\n')
return 1`, tc.size))
			wantStatus(t, res, tc.want)
			if tc.want == StatusOK && res.Dropped != 1 {
				t.Errorf("dropped %d; want 1, the frame at the cap", res.Dropped)
			}
		})
	}
}
