package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
)

// agentDir is a data directory whose kiln.toml runs the agent on a script route of
// replies, each a JSON line.
func agentDir(t testing.TB, replies ...string) string {
	t.Helper()
	dir := shortTemp(t)
	cfg := "[routes.test]\nkind = \"script\"\nscript = \"replies.jsonl\"\nprice_per_mtok = { input = 1.0, cached_input = 0.5, output = 2.0 }\n\n[agent]\nroute = \"test\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "replies.jsonl"), []byte(strings.Join(replies, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func codeReply(code string) string {
	b, _ := json.Marshal(map[string]string{"code": code})
	return string(b)
}

// errFound ends a followed stream.
var errFound = errors.New("found")

// follow reads the session's event stream of the daemon on dir after seq until a kind
// in until appears, returning the events read.
func follow(t *testing.T, dir, session string, after int64, until ...string) []client.Event {
	t.Helper()
	d, err := client.DialDaemon(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var got []client.Event
	err = d.Events(t.Context(), session, after, true, func(e client.Event) error {
		got = append(got, e)
		if slices.Contains(until, e.Kind) {
			return errFound
		}
		return nil
	})
	if !errors.Is(err, errFound) {
		t.Fatalf("the stream ended before %v: %v", until, err)
	}
	return got
}

// hasTimer says whether events hold an input a timer fired.
func hasTimer(events []client.Event) bool {
	return slices.ContainsFunc(events, func(e client.Event) bool {
		return e.Kind == "event" && strings.Contains(string(e.Raw), `"source":"timer"`)
	})
}

func endReason(t *testing.T, e client.Event) string {
	var r struct {
		Record struct {
			Body struct {
				EndReason string `json:"end_reason"`
			} `json:"body"`
		} `json:"record"`
	}
	if err := json.Unmarshal(e.Raw, &r, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	return r.Record.Body.EndReason
}

const sendReply = `{"code":"await runtime.request(\"local.send\", text=\"hello, operator\")","usage":{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":400},"completion_tokens":20}}`

func TestChatRunsATurn(t *testing.T) {
	t.Parallel()
	dir := agentDir(t, sendReply, codeReply(`await runtime.wait(None, reason="done")`))
	startServe(t, dir)
	cmd := kilnCommand(t, "chat", "s", "--data", dir)
	cmd.Stdin = strings.NewReader("say hello\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"· turn 1 begins", "agent: hello, operator", "· cell c-1 ok", "· cell c-2 yielded", "· turn 1 ended waited after 2 steps"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("chat's output lacks %q:\n%s", want, out)
		}
	}
	turns, err := kilnCommand(t, "turns", "s", "--data", dir).CombinedOutput()
	// 600 uncached at $1, 400 cached at $0.5, 20 out at $2 a million: 600+200+40 µ$; the
	// second call reported nothing, so the turn's cost is absent.
	if err != nil || !strings.Contains(string(turns), "waited  1000  400     -      20   -") {
		t.Errorf("kiln turns: %v\n%s", err, turns)
	}
	usage, err := kilnCommand(t, "usage", "--data", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(usage), "test   s        2      1000  400     -      20   40.0%  -") {
		t.Errorf("kiln usage: %v\n%s", err, usage)
	}
}

func TestTurnCancel(t *testing.T) {
	t.Parallel()
	dir := agentDir(t, `{"hold":true}`)
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/inputs", `{"text":"go"}`, 201, nil)
	follow(t, dir, "s", 0, "turn.start")
	out, err := kilnCommand(t, "turns", "cancel", "s", "--data", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cancelled the running turn") {
		t.Fatalf("%v\n%s", err, out)
	}
	got := follow(t, dir, "s", 0, "turn.end")
	if r := endReason(t, got[len(got)-1]); r != "cancelled" {
		t.Fatalf("end reason %q", r)
	}
	var reply struct {
		Cancelled bool `json:"cancelled"`
	}
	s.call("POST", "/v1/sessions/s/turn:cancel", "", 200, &reply)
	if reply.Cancelled {
		t.Error("a second cancel found a turn running")
	}
}

func TestKilledMidTurnEndsHostDiedOnce(t *testing.T) {
	t.Parallel()
	dir := agentDir(t, codeReply("import time\ntime.sleep(100)"), codeReply(`await runtime.wait(None, reason="done")`))
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/inputs", `{"text":"sleep"}`, 201, nil)
	follow(t, dir, "s", 0, "execution")
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited

	s2 := startServe(t, dir)
	got := follow(t, dir, "s", 0, "turn.end")
	if r := endReason(t, got[len(got)-1]); r != "host_died" {
		t.Fatalf("the turn the daemon died in ended %q", r)
	}
	s2.cmd.Process.Signal(syscall.SIGTERM)
	<-s2.exited
	s3 := startServe(t, dir)
	s3.cmd.Process.Signal(syscall.SIGTERM)
	<-s3.exited
	out, err := kilnCommand(t, "turns", "s", "--data", dir, "--json").CombinedOutput()
	if err != nil || strings.Count(string(out), `"end_reason":"host_died"`) != 1 || strings.Count(string(out), "\n") != 1 {
		t.Fatalf("turns after two restarts: %v\n%s", err, out)
	}
	log, err := kilnCommand(t, "log", "--data", dir, "--session", "s", "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(log), `"text":"sleep"`) {
		t.Fatalf("the inbox lost its input: %v\n%s", err, log)
	}
}

func TestWaitTimerFiresAfterKill(t *testing.T) {
	t.Parallel()
	dir := agentDir(t, codeReply(`await runtime.wait(1, reason="a nap")`), codeReply(`await runtime.wait(None, reason="done")`))
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/inputs", `{"text":"nap"}`, 201, nil)
	first := follow(t, dir, "s", 0, "turn.end")
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited

	startServe(t, dir)
	got := follow(t, dir, "s", first[len(first)-1].Seq, "turn.end")
	timer := hasTimer(got)
	if r := endReason(t, got[len(got)-1]); r != "waited" || !timer {
		t.Fatalf("after the restart: timer %v, end %q", timer, r)
	}
}

func TestRenderChat(t *testing.T) {
	var b strings.Builder
	for _, raw := range []string{
		`{"seq":1,"kind":"event","record":{"source":"operator","payload":{"text":"hi"}}}`,
		`{"seq":2,"kind":"event","record":{"source":"agent","payload":{"text":"hello"}}}`,
		`{"seq":3,"kind":"receipt","record":{"kind":"local.send","detail":{"text":"secret"},"receipt":{"status":"held","reason":"names a password"}}}`,
		`{"seq":4,"kind":"receipt","record":{"kind":"local.send","detail":{"text":"fine"},"receipt":{"status":"confirmed","reason":null}}}`,
		`{"seq":5,"kind":"model_call","record":{"kind":"model_call","body":{"turn":1,"purpose":"step","route":"main","error":"route: call failed after 3 attempts: 500"}}}`,
		`{"seq":6,"kind":"turn.end","record":{"kind":"turn.end","body":{"turn":1,"end_reason":"model_error","steps":1,"detail":"500"}}}`,
	} {
		var e client.Event
		if err := json.Unmarshal([]byte(raw), &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		e.Raw = []byte(raw)
		renderChat(&b, e)
	}
	want := "agent: hello\nheld (names a password): secret\n· turn 1: step call to main failed: route: call failed after 3 attempts: 500\n· turn 1 ended model_error after 1 steps: 500\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestTranscriptShowsModelCalls(t *testing.T) {
	t.Parallel()
	dir := agentDir(t, sendReply, codeReply(`await runtime.wait(None, reason="done")`))
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/inputs", `{"text":"say hello"}`, 201, nil)
	follow(t, dir, "s", 0, "turn.end")
	// The first call reported its usage: 600+200+40 µ$; the second reported nothing.
	first := "[model call 1 of turn 1 · step · test/script · "
	firstUsage := " · in 1000 · cached 400 · write - · out 20 · cost $0.000840]"
	second := "[model call 2 of turn 1 · step · test/script · "
	secondUsage := " · in - · cached - · write - · out - · cost -]"
	check := func(daemon string) {
		out, err := kilnCommand(t, "transcript", "show", "s", "--data", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", daemon, err, out)
		}
		text := string(out)
		order := []string{"──── user", first, firstUsage, "──── assistant", "local.send", "──── tool", second, secondUsage, "runtime.wait"}
		at := 0
		for _, want := range order {
			i := strings.Index(text[at:], want)
			if i < 0 {
				t.Fatalf("%s: transcript show lacks %q after byte %d:\n%s", daemon, want, at, text)
			}
			at += i + len(want)
		}
		out, err = kilnCommand(t, "transcript", "show", "s", "--data", dir, "--json").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", daemon, err, out)
		}
		var messages []struct {
			Seq  int64  `json:"seq"`
			Role string `json:"role"`
			Call *struct {
				Purpose    string         `json:"purpose"`
				Usage      map[string]any `json:"usage"`
				CostMicros *int64         `json:"cost_micros"`
			} `json:"call"`
		}
		if err := json.Unmarshal(out, &messages, json.RejectUnknownMembers(false)); err != nil {
			t.Fatalf("%s: %v\n%s", daemon, err, out)
		}
		var roles []string
		var calls int
		for i, m := range messages {
			roles = append(roles, m.Role)
			if i > 0 && m.Seq <= messages[i-1].Seq && messages[i-1].Role != "system" {
				t.Errorf("%s: message %d (record %d) follows record %d", daemon, i, m.Seq, messages[i-1].Seq)
			}
			if m.Role != "model" {
				if m.Call != nil {
					t.Errorf("%s: a %s message carries a call", daemon, m.Role)
				}
				continue
			}
			calls++
			c := m.Call
			switch {
			case c == nil || c.Purpose != "step":
				t.Errorf("%s: call %d: %+v", daemon, calls, c)
			case calls == 1 && (c.Usage == nil || c.CostMicros == nil || *c.CostMicros != 840):
				t.Errorf("%s: the first call's usage or cost is lost: %+v", daemon, c)
			case calls == 2 && (c.Usage != nil || c.CostMicros != nil):
				t.Errorf("%s: the second call reported nothing, yet shows %+v", daemon, c)
			}
		}
		if want := []string{"system", "user", "model", "assistant", "tool", "model", "assistant", "tool"}; !slices.Equal(roles, want) {
			t.Errorf("%s: roles %v, want %v", daemon, roles, want)
		}
	}
	check("through the daemon")
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
	check("from the record")
}
