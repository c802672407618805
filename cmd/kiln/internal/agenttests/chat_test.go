package agenttests

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

const sendReply = `{"code":"await runtime.request(\"local.send\", text=\"hello, operator\")","usage":{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":400},"completion_tokens":20}}`

func TestChatRunsATurn(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, sendReply, clitest.CodeReply(`await runtime.wait(None, reason="done")`))
	clitest.StartServe(t, dir)
	cmd := clitest.Command(t, "chat", "s", "--data", dir)
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
	turns, err := clitest.Command(t, "turns", "s", "--data", dir).CombinedOutput()
	// 600 uncached at $1, 400 cached at $0.5, 20 out at $2 a million: 600+200+40 µ$; the
	// second call reported nothing, so the turn's cost is absent.
	if err != nil || !strings.Contains(string(turns), "waited  1000  400     -      20   -") {
		t.Errorf("kiln turns: %v\n%s", err, turns)
	}
	usage, err := clitest.Command(t, "usage", "--data", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(usage), "test   s        2      1000  400     -      20   40.0%  -") {
		t.Errorf("kiln usage: %v\n%s", err, usage)
	}
}

func TestTurnCancel(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, `{"hold":true}`)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"go"}`, 201, nil)
	clitest.Follow(t, dir, "s", 0, "turn.start")
	out, err := clitest.Command(t, "turns", "cancel", "s", "--data", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cancelled the running turn") {
		t.Fatalf("%v\n%s", err, out)
	}
	got := clitest.Follow(t, dir, "s", 0, "turn.end")
	if r := clitest.EndReason(t, got[len(got)-1]); r != "cancelled" {
		t.Fatalf("end reason %q", r)
	}
	var reply struct {
		Cancelled bool `json:"cancelled"`
	}
	s.Call("POST", "/v1/sessions/s/turn:cancel", "", 200, &reply)
	if reply.Cancelled {
		t.Error("a second cancel found a turn running")
	}
}

func TestKilledMidTurnEndsHostDiedOnce(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, clitest.CodeReply("import time\ntime.sleep(100)"), clitest.CodeReply(`await runtime.wait(None, reason="done")`))
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"sleep"}`, 201, nil)
	clitest.Follow(t, dir, "s", 0, "execution")
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Exited

	s2 := clitest.StartServe(t, dir)
	got := clitest.Follow(t, dir, "s", 0, "turn.end")
	if r := clitest.EndReason(t, got[len(got)-1]); r != "host_died" {
		t.Fatalf("the turn the daemon died in ended %q", r)
	}
	s2.Cmd.Process.Signal(syscall.SIGTERM)
	<-s2.Exited
	s3 := clitest.StartServe(t, dir)
	s3.Cmd.Process.Signal(syscall.SIGTERM)
	<-s3.Exited
	out, err := clitest.Command(t, "turns", "s", "--data", dir, "--json").CombinedOutput()
	if err != nil || strings.Count(string(out), `"end_reason":"host_died"`) != 1 || strings.Count(string(out), "\n") != 1 {
		t.Fatalf("turns after two restarts: %v\n%s", err, out)
	}
	log, err := clitest.Command(t, "log", "--data", dir, "--session", "s", "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(log), `"text":"sleep"`) {
		t.Fatalf("the inbox lost its input: %v\n%s", err, log)
	}
}

func TestWaitTimerFiresAfterKill(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, clitest.CodeReply(`await runtime.wait(1, reason="a nap")`), clitest.CodeReply(`await runtime.wait(None, reason="done")`))
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"nap"}`, 201, nil)
	first := clitest.Follow(t, dir, "s", 0, "turn.end")
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Exited

	clitest.StartServe(t, dir)
	got := clitest.Follow(t, dir, "s", first[len(first)-1].Seq, "turn.end")
	timer := clitest.HasTimer(got)
	if r := clitest.EndReason(t, got[len(got)-1]); r != "waited" || !timer {
		t.Fatalf("after the restart: timer %v, end %q", timer, r)
	}
}

func TestTranscriptShowsModelCalls(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, sendReply, clitest.CodeReply(`await runtime.wait(None, reason="done")`))
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"say hello"}`, 201, nil)
	clitest.Follow(t, dir, "s", 0, "turn.end")
	// The first call reported its usage: 600+200+40 µ$; the second reported nothing.
	first := "[model call 1 of turn 1 · step · test/script · "
	firstUsage := " · in 1000 · cached 400 · write - · out 20 · cost $0.000840]"
	second := "[model call 2 of turn 1 · step · test/script · "
	secondUsage := " · in - · cached - · write - · out - · cost -]"
	check := func(daemon string) {
		out, err := clitest.Command(t, "transcript", "show", "s", "--data", dir).CombinedOutput()
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
		out, err = clitest.Command(t, "transcript", "show", "s", "--data", dir, "--json").CombinedOutput()
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
	s.Cmd.Process.Signal(syscall.SIGTERM)
	<-s.Exited
	check("from the record")
}
