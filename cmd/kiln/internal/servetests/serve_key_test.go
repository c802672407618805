package servetests

import (
	"bufio"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestKeyRetriedAfterKillRunsOnce retries requests with idempotency keys across a daemon
// killed with SIGKILL: a cell that ended, and one the daemon died in, are each answered
// by their first execution, and the record holds each once; the key with other code is
// refused.
func TestKeyRetriedAfterKillRunsOnce(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	const ended = `{"code":"n = globals().get('n', 0) + 1\nn","idempotency_key":"k1","wait_ms":10000}`
	const dying = `{"code":"import time\ntime.sleep(60)","idempotency_key":"k2","wait_ms":0}`
	var first, running clitest.ExecRecord
	s.Call("POST", "/v1/sessions/s/executions", ended, 200, &first)
	s.Call("POST", "/v1/sessions/s/executions", dying, 202, &running)
	s.Kill(clitest.WaitForChild(t, s.Cmd.Process.Pid))

	s2 := clitest.StartServe(t, dir)
	var again, closed clitest.ExecRecord
	s2.Call("POST", "/v1/sessions/s/executions", ended, 200, &again)
	if again.ID != first.ID || again.Status != "ok" || len(again.Output) != 1 || again.Output[0].Text != "1" {
		t.Fatalf("the ended cell retried: %+v; want %+v", again, first)
	}
	s2.Call("POST", "/v1/sessions/s/executions", dying, 200, &closed)
	if closed.ID != running.ID || closed.Status != "failed" {
		t.Fatalf("the cell the daemon died in, retried: %+v; want %s, failed", closed, running.ID)
	}
	s2.Call("POST", "/v1/sessions/s/executions", `{"code":"2","idempotency_key":"k1"}`, 409, nil)

	resp, err := s2.Client.Get("http://kiln/v1/sessions/s/events?follow=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	starts := map[string]int{}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var e struct {
			Kind   string `json:"kind"`
			Record struct {
				Execution string `json:"execution_id"`
			} `json:"record"`
		}
		if err := json.Unmarshal(lines.Bytes(), &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		if e.Kind == "execution" {
			starts[e.Record.Execution]++
		}
	}
	if len(starts) != 2 {
		t.Fatalf("executions in the record: %v; want two, once each", starts)
	}
}
