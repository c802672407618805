package kiln_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/journal"
)

// recordedTools are Go tools for recorded runs: echo answers its text, fail fails, and
// big answers a JSON string of exactly n bytes.
func recordedTools() []kiln.Tool {
	return []kiln.Tool{
		{Namespace: "t", Name: "echo", InputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			Handler: func(_ context.Context, args []byte) (any, error) {
				var a struct {
					Text string `json:"text"`
				}
				err := json.Unmarshal(args, &a)
				return a.Text, err
			}},
		{Namespace: "t", Name: "fail", Handler: func(context.Context, []byte) (any, error) { return nil, errors.New("it failed") }},
		{Namespace: "t", Name: "big", Handler: func(_ context.Context, args []byte) (any, error) {
			var a struct {
				N int `json:"n"`
			}
			err := json.Unmarshal(args, &a)
			return strings.Repeat("x", a.N-2), err // the quotes make it n bytes of JSON
		}},
	}
}

// programLog is a runner, and session s of data to record runs in, both closed when
// the test ends.
func programLog(t *testing.T, data string) (*kiln.Runner, *kiln.ProgramLog) {
	t.Helper()
	r, err := kiln.NewRunner(context.Background(), kiln.RunnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	l, err := kiln.OpenProgramLog(context.Background(), data, "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return r, l
}

// recordedRun runs source recorded in session s of data, with recordedTools.
func recordedRun(t *testing.T, data, source string) kiln.Result {
	t.Helper()
	ctx := context.Background()
	ts, err := kiln.OpenToolset(ctx, kiln.ToolsetOptions{Tools: recordedTools()})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	r, l := programLog(t, data)
	res, err := l.Run(ctx, r, kiln.Program{Source: source}, ts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// sessionLog is every entry of session s of data.
func sessionLog(t *testing.T, data string) []journal.LogEntry {
	t.Helper()
	j, err := journal.Open(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	entries, err := j.Log(context.Background(), journal.LogFilter{Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// TestARecordedProgramsToolCallsAreInTheLog: a program run in a ProgramLog is in the
// session's log, its start and its end, and between them each call it made of a Go tool,
// as the host request tools.call of the run with its reply and the reply's time: a
// result, a tool's error, an argument the schema refuses.
func TestARecordedProgramsToolCallsAreInTheLog(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	source := `out = [await t.echo({"text": "hi"})]
for call in (t.fail(), t.echo({"text": 1})):
    try:
        await call
    except ToolError as e:
        out.append(str(e))
return out`
	res := recordedRun(t, data, source)
	if res.Status != kiln.RunOK || encoded(t, res.Value) !=
		`["hi","tool_error: it failed","invalid_arguments: t.echo: arguments.text: want string, got integer"]` {
		t.Fatalf("%+v", res)
	}
	entries := sessionLog(t, data)
	var kinds []journal.EntryKind
	var requests []journal.LogRequest
	for _, e := range entries {
		kinds = append(kinds, e.Kind)
		if r, ok := e.Record.(journal.LogRequest); ok && e.Kind == journal.EntryReply {
			requests = append(requests, r)
		}
	}
	want := []journal.EntryKind{journal.EntrySession, journal.EntryProgramStart, journal.EntryRequest, journal.EntryReply,
		journal.EntryRequest, journal.EntryReply, journal.EntryRequest, journal.EntryReply, journal.EntryProgramEnd}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("kinds %v; want %v", kinds, want)
	}
	start, end := entries[1].Record.(journal.LogProgram), entries[len(entries)-1].Record.(journal.LogProgram)
	if start.RunID != "p-1" || start.Code != source || start.CodeBytes != int64(len(source)) || start.Status != kiln.RunOK ||
		end.EndedAt == nil || end.Error != nil || end.RefusedCalls != 0 {
		t.Errorf("the run's record: %+v", end)
	}
	for i, w := range []struct{ args, kind, value, code, message string }{
		{`{"text":"hi"}`, "ok", `"hi"`, "", ""},
		{`{}`, "error", "", "tool_error", "it failed"},
		{`{"text":1}`, "error", "", "invalid_arguments", "t.echo: arguments.text: want string, got integer"},
	} {
		r := requests[i]
		name := strings.Split(strings.Split(source, "t.")[i+1], "(")[0]
		body := fmt.Sprintf(`{"method":"tools.call","namespace":"t","name":%q,"arguments":%s}`, name, w.args)
		if r.ExecutionID != "p-1" || r.Generation != "" || r.RequestID != fmt.Sprintf("r-%d", i+1) || r.Method != "tools.call" ||
			string(r.Body) != body {
			t.Errorf("call %d: %+v; want the body %s", i+1, r, body)
		}
		if p := r.Reply; p == nil || p.Kind != w.kind || string(p.Value) != w.value || p.Code != w.code || p.Message != w.message ||
			p.RepliedAt.Before(r.ReceivedAt) {
			t.Errorf("call %d's reply: %+v; want %+v", i+1, p, w)
		}
	}

	if res := recordedRun(t, data, "return 1"); res.Status != kiln.RunOK {
		t.Fatalf("%+v", res)
	}
	if last := sessionLog(t, data); last[len(last)-1].Record.(journal.LogProgram).RunID != "p-2" {
		t.Errorf("the second run: %+v", last[len(last)-1])
	}
}

// TestARecordedRunsToolCallsAreBounded: a recorded run makes MaxProgramToolCalls calls
// and no more; a reply of the bound of a cell's is given and one byte more is refused;
// a call whose request is over 1 MiB is refused; the refused calls are not recorded, and
// the run's end counts them.
func TestARecordedRunsToolCallsAreBounded(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const maxReply = 1<<20 - 4<<10 // a cell's reply bound, host.MaxReplyBytes
	callAt := 1<<20 - len(`{"method":"tools.call","namespace":"t","name":"fail","arguments":{"text":""}}`)
	source := fmt.Sprintf(`out = []
for n in (%d, %d):
    try:
        out.append(len(await t.big({"n": n})) + 2)
    except ToolError as e:
        out.append(str(e))
for n in (%d, %d):
    try:
        await t.fail({"text": "x" * n})
    except ToolError as e:
        out.append(str(e))
for i in range(%d):
    await t.echo({"text": str(i)})
try:
    await t.echo({"text": "one more"})
except ToolError as e:
    out.append(str(e))
return out`, maxReply, maxReply+1, callAt, callAt+1, kiln.MaxProgramToolCalls-3)
	res := recordedRun(t, data, source)
	want := fmt.Sprintf(`[%d,"reply_too_large: the answer is %d bytes, over the %d a reply carries: ask for less at a time","tool_error: it failed",`+
		`"invalid_request: the call is %d bytes, over the 1048576 a recorded call carries",`+
		`"request_limit: a recorded program run may make at most %d tool calls"]`,
		maxReply, maxReply+1, maxReply, 1<<20+1, kiln.MaxProgramToolCalls)
	if res.Status != kiln.RunOK || encoded(t, res.Value) != want {
		t.Fatalf("%+v\nwant the value %s", res, want)
	}
	var calls int
	var tooLarge bool
	var end journal.LogProgram
	for _, e := range sessionLog(t, data) {
		switch r := e.Record.(type) {
		case journal.LogRequest:
			if e.Kind == journal.EntryRequest {
				calls++
			} else if r.Reply.Code == "reply_too_large" {
				tooLarge = len(r.Reply.Value) == 0
			}
		case journal.LogProgram:
			end = r
		}
	}
	if calls != kiln.MaxProgramToolCalls || !tooLarge || end.RefusedCalls != 2 || end.Status != kiln.RunOK {
		t.Errorf("%d calls recorded (want %d), the large reply refused in the record: %v, the run's end: %+v",
			calls, kiln.MaxProgramToolCalls, tooLarge, end)
	}
}

// TestARecordedRunThatCannotRunSaysSo: an invalid program is recorded as not run, with
// why, and the error is ErrInvalidProgram.
func TestARecordedRunThatCannotRunSaysSo(t *testing.T) {
	data, ctx := t.TempDir(), context.Background()
	r, l := programLog(t, data)
	if _, err := l.Run(ctx, r, kiln.Program{Source: "return 1", Limits: kiln.Limits{CPUSeconds: -1}}, nil); !errors.Is(err, kiln.ErrInvalidProgram) {
		t.Fatalf("got %v; want %v", err, kiln.ErrInvalidProgram)
	}
	entries := sessionLog(t, data)
	end := entries[len(entries)-1]
	if p, ok := end.Record.(journal.LogProgram); !ok || end.Kind != journal.EntryProgramEnd || p.Status != kiln.ProgramNotRun ||
		p.Error == nil || !strings.Contains(*p.Error, "CPUSeconds") {
		t.Errorf("the run's end: %+v", end)
	}
	if _, err := kiln.OpenProgramLog(ctx, data, "not a name"); err == nil {
		t.Error("a session name that is not an identifier was taken")
	}
}

// TestARecordedCallTheRunDidNotWaitForIsAnsweredEnded: a call still running when its
// run ends, one the program did not await or one a wall-clock limit cut, is answered
// execution_ended in the record, before the run's end, though the tool then returns a
// value: never an ok reply the program did not get.
func TestARecordedCallTheRunDidNotWaitForIsAnsweredEnded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, source string
		limits       kiln.Limits
		status       kiln.RunStatus
	}{
		{"not awaited", "import asyncio\nasyncio.ensure_future(t.slow())\nawait t.started()\nreturn 1", kiln.Limits{}, kiln.RunOK},
		{"wall clock", "await t.slow()", kiln.Limits{Wall: 5 * time.Second}, kiln.RunTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, ctx := t.TempDir(), context.Background()
			started := make(chan struct{})
			ts, err := kiln.OpenToolset(ctx, kiln.ToolsetOptions{Tools: []kiln.Tool{
				{Namespace: "t", Name: "slow", Handler: func(ctx context.Context, _ []byte) (any, error) {
					close(started)
					<-ctx.Done() // the run ended
					return "late", nil
				}},
				{Namespace: "t", Name: "started", Handler: func(ctx context.Context, _ []byte) (any, error) {
					<-started
					return nil, nil
				}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer ts.Close()
			r, l := programLog(t, data)
			res, err := l.Run(ctx, r, kiln.Program{Source: c.source, Limits: c.limits}, ts)
			if err != nil || res.Status != c.status {
				t.Fatalf("%+v, %v; want %s", res, err, c.status)
			}
			var got []string
			for _, e := range sessionLog(t, data) {
				s := string(e.Kind)
				switch rec := e.Record.(type) {
				case journal.LogRequest:
					s += " " + strings.Split(strings.Split(string(rec.Body), `"name":"`)[1], `"`)[0]
					if e.Kind == journal.EntryReply {
						s += " " + rec.Reply.Kind + " " + rec.Reply.Code + " " + rec.Reply.Message + string(rec.Reply.Value)
					}
				case journal.LogProgram:
					s += " " + string(rec.Status)
				}
				got = append(got, strings.Join(strings.Fields(s), " "))
			}
			if c.status == kiln.RunOK && len(got) > 4 {
				slices.Sort(got[2:4]) // the two calls are recorded as they come
			}
			program, ended := "program "+string(c.status), "reply slow error execution_ended run p-1 ended before the tool answered"
			want := []string{"session", program, "request slow", ended, "program.end " + string(c.status)}
			if c.status == kiln.RunOK {
				want = []string{"session", program, "request slow", "request started", "reply started ok null", ended, "program.end ok"}
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
