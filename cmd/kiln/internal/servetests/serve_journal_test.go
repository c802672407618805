package servetests

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestDaemonKilledMidStreamKeepsWhatItShowed kills a daemon while its cell prints: the
// journal the next daemon reads holds everything a reader of the cell's live output was
// shown, and nothing the cell did not print, once, in order.
func TestDaemonKilledMidStreamKeepsWhatItShowed(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/s/executions",
		`{"code":"import time\nfor i in range(10**6):\n    print(i, flush=True)\n    time.sleep(0.001)","wait_ms":0}`, 202, &rec)
	worker := clitest.WaitForChild(t, s.Cmd.Process.Pid)

	resp, err := s.Client.Get("http://kiln/v1/executions/" + rec.ID + "/output")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("output: %d", resp.StatusCode)
	}
	lines := bufio.NewScanner(resp.Body)
	var shown strings.Builder
	for chunks := 0; chunks < 20 && lines.Scan(); chunks++ {
		var c struct {
			Stream string `json:"stream"`
			Text   string `json:"text"`
		}
		if err := json.Unmarshal(lines.Bytes(), &c, json.RejectUnknownMembers(false)); err != nil || c.Stream != "stdout" {
			t.Fatalf("output line %s: %v", lines.Bytes(), err)
		}
		shown.WriteString(c.Text)
	}
	s.Kill(worker)

	s2 := clitest.StartServe(t, dir)
	var closed clitest.ExecRecord
	s2.Call("GET", "/v1/executions/"+rec.ID, "", 200, &closed)
	if closed.Status != "failed" || closed.Error == nil || !strings.Contains(*closed.Error, "host ended") {
		t.Fatalf("the cell the daemon died in: %+v", closed)
	}
	events, err := s2.Client.Get("http://kiln/v1/sessions/s/events?follow=0")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	var journaled strings.Builder
	entries := bufio.NewScanner(events.Body)
	entries.Buffer(nil, 1<<20)
	for index := 0; entries.Scan(); {
		var e struct {
			Kind   string `json:"kind"`
			Record struct {
				Execution string `json:"execution_id"`
				Index     int    `json:"index"`
				Stream    string `json:"stream"`
				Text      string `json:"text"`
			} `json:"record"`
		}
		if err := json.Unmarshal(entries.Bytes(), &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		if e.Kind != "output" {
			continue
		}
		if e.Record.Index != index || e.Record.Stream != "stdout" {
			t.Fatalf("chunk %d of %s: %+v", index, rec.ID, e.Record)
		}
		index++
		journaled.WriteString(e.Record.Text)
	}
	var printed strings.Builder
	for i := 0; printed.Len() < journaled.Len(); i++ {
		fmt.Fprintln(&printed, i)
	}
	if journaled.String() != printed.String() {
		t.Fatalf("the journal holds %q; want what the cell printed, %q", journaled.String(), printed.String())
	}
	if !strings.HasPrefix(journaled.String(), shown.String()) {
		t.Fatalf("a reader was shown %q; the journal holds %q", shown.String(), journaled.String())
	}
}
