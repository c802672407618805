package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
)

// agentData is a data directory whose kiln.toml gives each session an agent on a
// script route: its model calls are answered cells of codes, in order, one a call.
func agentData(t *testing.T, codes ...string) string {
	t.Helper()
	dir := shortTemp(t)
	cfg := "[routes.test]\nkind = \"script\"\nscript = \"replies.jsonl\"\n\n[agent]\nroute = \"test\"\n"
	if err := os.WriteFile(filepath.Join(dir, kilndaemon.ConfigFile), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var replies []byte
	for _, code := range codes {
		line, err := json.Marshal(map[string]string{"code": code})
		if err != nil {
			t.Fatal(err)
		}
		replies = append(append(replies, line...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "replies.jsonl"), replies, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// endTurn is an agent's cell that ends its turn: it waits for the next input.
const endTurn = "await runtime.wait(None)"

// connects is a cell that connects to b, as b.accepted tells, then reads from the
// connection until it ends.
func connects(b *blocker) string {
	return "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(" + strconv.Quote(b.path) + ")\nwhile s.recv(1):\n    pass"
}

// input sends text to session sid.
func (d *daemon) input(sid, text string) {
	d.t.Helper()
	resp, data := d.do("POST", "/v1/sessions/"+sid+"/inputs", map[string]any{"text": text})
	d.want(resp, data, http.StatusCreated, nil)
}

// turnEnds follows session sid's events until its agent has ended n turns.
func (d *daemon) turnEnds(sid string, n int) {
	d.t.Helper()
	seen := 0
	d.until(sid, fmt.Sprintf("%d turn ends", n), func(kind, _, _ string) bool {
		if kind == "turn.end" {
			seen++
		}
		return seen == n
	})
}

// goroutinesIn counts the goroutines of this process with fn on their stacks.
func goroutinesIn(fn string) int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// TestAClientsCellWhileTheAgentRunsOneIsBusy sends a client's cell while the session's
// agent runs a cell of its own: it is refused busy (409), and the agent's cells, after
// the client's, are told to none of the client's calls (each would start a journal of
// output that nobody closes).
func TestAClientsCellWhileTheAgentRunsOneIsBusy(t *testing.T) {
	b := newBlocker(t)
	d := startDaemon(t, kilndaemon.Options{Heartbeat: time.Hour,
		DataDir: agentData(t, connects(b), endTurn, "print('the agent again')", endTurn)})
	d.create("s")
	if _, rec := d.execute("s", "x = 1", 10000); rec.Status != "ok" {
		t.Fatalf("the client's first cell: %+v", rec)
	}
	d.input("s", "go")
	conn := await(t, b.accepted, "the agent's cell")
	resp, data := d.do("POST", "/v1/sessions/s/executions", map[string]any{"code": "x", "wait_ms": 0})
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("a client's cell while the agent's runs: %d %s; want 409", resp.StatusCode, data)
	} else {
		wantCode(t, data, api.CodeBusy)
	}
	conn.Close()
	d.turnEnds("s", 1)
	if n := goroutinesIn("serve.(*journal).run"); n != 0 {
		t.Errorf("%d journals run after the agent's cell, with no cell running", n)
	}
	if _, rec := d.execute("s", "x", 10000); result(rec) != "1" {
		t.Fatalf("the client's cell after the agent's: %+v", rec)
	}
	d.input("s", "again")
	d.turnEnds("s", 2)
	if n := goroutinesIn("serve.(*journal).run"); n != 0 {
		t.Errorf("%d journals run after the agent's second turn, with no cell running", n)
	}
}
