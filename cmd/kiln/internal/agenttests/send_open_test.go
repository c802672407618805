package agenttests

import (
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestSendOpensAnAgentSession sends to a session an agent daemon has not opened yet: send
// opens it, as kiln chat does, and the agent takes the input in a turn.
func TestSendOpensAnAgentSession(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, sendReply, clitest.CodeReply(`await runtime.wait(None, reason="done")`))
	clitest.StartServe(t, dir)
	out := clitest.Out(t, "send", "--data", dir, "--session", "demo", "say hello")
	if !strings.HasPrefix(out, "event:") {
		t.Fatalf("kiln send: %q", out)
	}
	clitest.Follow(t, dir, "demo", 0, "turn.end")
}

// TestSendWithoutADaemonSaysHow sends to a session the record does not have, with no
// daemon: the error says how to make it.
func TestSendWithoutADaemonSaysHow(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	clitest.Out(t, "exec", "--data", dir, "--session", "other", "1")
	cmd := clitest.Command(t, "send", "--data", dir, "--session", "demo", "hello")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "start kiln serve --data "+dir) || !strings.Contains(string(out), "kiln exec --session demo") {
		t.Fatalf("kiln send to no session, no daemon: %v\n%s", err, out)
	}
}
