package agenttests

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/poll"
)

// untilStopped polls the daemon until session id is stopped.
func untilStopped(t *testing.T, s *clitest.Served, id string) {
	t.Helper()
	var info struct {
		State string `json:"state"`
	}
	stopped := func() bool {
		s.Call("GET", "/v1/sessions/"+id, "", 200, &info)
		return info.State == "stopped"
	}
	if !poll.Wait(time.Minute, stopped) {
		t.Fatalf("session %s is still %s", id, info.State)
	}
}

// lastSeq is the sequence number of the last of events.
func lastSeq(t *testing.T, dir, session string) int64 {
	t.Helper()
	got := clitest.Follow(t, dir, session, 0, "turn.end")
	return got[len(got)-1].Seq
}

// TestAnInputReopensAStoppedAgentSession: an agent session stopped for idleness is
// opened again by an input, through the API and kiln send alike, and its agent takes it.
func TestAnInputReopensAStoppedAgentSession(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, slices.Repeat([]string{`{"text":"done"}`}, 12)...)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s","limits":{"idle_timeout_ms":200}}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"go"}`, 201, nil)
	after := lastSeq(t, dir, "s")
	untilStopped(t, s, "s")

	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"again"}`, 201, nil)
	got := clitest.Follow(t, dir, "s", after, "turn.end")
	if r := clitest.EndReason(t, got[len(got)-1]); r != "no_code" {
		t.Fatalf("the turn the API's input woke ended %q", r)
	}
	after = got[len(got)-1].Seq

	untilStopped(t, s, "s")
	out := clitest.Out(t, "send", "--data", dir, "--session", "s", "wake")
	if !strings.HasPrefix(out, "event:") || !strings.Contains(out, "attention: wake") {
		t.Fatalf("kiln send to the stopped session: %q", out)
	}
	got = clitest.Follow(t, dir, "s", after, "turn.end")
	if r := clitest.EndReason(t, got[len(got)-1]); r != "no_code" {
		t.Fatalf("the turn kiln send woke ended %q", r)
	}
}

// TestATimerFiresAfterAReopen: a session stopped while its agent waits with a deadline
// is opened again, and the wait's timer wakes the agent there.
func TestATimerFiresAfterAReopen(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, clitest.CodeReply(`await runtime.wait(1, reason="a nap")`), clitest.CodeReply(`await runtime.wait(None, reason="done")`))
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"nap"}`, 201, nil)
	after := lastSeq(t, dir, "s")
	s.Call("DELETE", "/v1/sessions/s", "", 200, nil)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	got := clitest.Follow(t, dir, "s", after, "turn.end")
	if r := clitest.EndReason(t, got[len(got)-1]); r != "waited" {
		t.Fatalf("the timer's turn ended %q", r)
	}
	timer := false
	for _, e := range got {
		if strings.Contains(string(e.Raw), `"source":"timer"`) {
			timer = true
		}
	}
	if !timer {
		t.Errorf("no timer input woke the turn: %d events", len(got))
	}
}
