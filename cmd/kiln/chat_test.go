package main

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
)

// agentDir is a data directory whose kiln.toml runs the agent on a script route of
// replies, each a JSON line.
func agentDir(t *testing.T, replies ...string) string {
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

// follow reads the session's event stream after seq until a kind in until appears,
// returning the entries read.
func (s *served) follow(session string, after int64, until ...string) []entry {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(s.t.Context(), "GET", "http://kiln/v1/sessions/"+session+"/events?after="+itoa(int(after)), nil)
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []entry
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, maxEventLine)
	for sc.Scan() {
		var e entry
		if json.Unmarshal(sc.Bytes(), &e, json.RejectUnknownMembers(false)) != nil || e.Kind == "heartbeat" {
			continue
		}
		got = append(got, e)
		for _, k := range until {
			if e.Kind == k {
				return got
			}
		}
	}
	s.t.Fatalf("the stream ended before %v: %v", until, sc.Err())
	return nil
}

func endReason(t *testing.T, e entry) string {
	var r struct {
		Body struct {
			EndReason string `json:"end_reason"`
			Turn      int64  `json:"turn"`
		} `json:"body"`
	}
	if err := json.Unmarshal(e.Record, &r, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	return r.Body.EndReason
}

const sendReply = `{"code":"await runtime.request(\"local.send\", text=\"hello, operator\")","usage":{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":400},"completion_tokens":20}}`

func TestChatRunsATurn(t *testing.T) {
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
	dir := agentDir(t, `{"hold":true}`)
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/inputs", `{"text":"go"}`, 201, nil)
	s.follow("s", 0, "model_call", "turn.start")
	out, err := kilnCommand(t, "turns", "cancel", "s", "--data", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cancelled the running turn") {
		t.Fatalf("%v\n%s", err, out)
	}
	got := s.follow("s", 0, "turn.end")
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
	dir := agentDir(t, codeReply("import time\ntime.sleep(100)"), codeReply(`await runtime.wait(None, reason="done")`))
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/inputs", `{"text":"sleep"}`, 201, nil)
	s.follow("s", 0, "execution")
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited

	s2 := startServe(t, dir)
	got := s2.follow("s", 0, "turn.end")
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
	dir := agentDir(t, codeReply(`await runtime.wait(1, reason="a nap")`), codeReply(`await runtime.wait(None, reason="done")`))
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.call("POST", "/v1/sessions/s/inputs", `{"text":"nap"}`, 201, nil)
	first := s.follow("s", 0, "turn.end")
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited

	s2 := startServe(t, dir)
	got := s2.follow("s", first[len(first)-1].Seq, "turn.end")
	timer := false
	for _, e := range got {
		if e.Kind == "event" && strings.Contains(string(e.Record), `"source":"timer"`) {
			timer = true
		}
	}
	if r := endReason(t, got[len(got)-1]); r != "waited" || !timer {
		t.Fatalf("after the restart: timer %v, end %q", timer, r)
	}
}
