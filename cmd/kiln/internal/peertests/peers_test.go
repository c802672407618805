package peertests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/journal"
)

// peerScript is one script every session of the daemon reads from its start: the
// parent opens a peer, sends it a request and waits; the peer answers and waits; the
// parent, woken by the result, says it.
var peerScript = []string{
	clitest.CodeReply(`me = (await runtime.inspect())["session_id"]
if me == "boss":
    p = await runtime.request("peer.open", mode="independent", evidence=[])
    await runtime.request("peer.send", peer_id=p["peer_id"], request_id="req-1", content="add 2 and 3", evidence=[])
    await runtime.wait(None, reason="waiting for my peer")
else:
    await runtime.request("peer.submit_result", request_id="req-1", result={"sum": 2 + 3})
    await runtime.wait(None, reason="answered")`),
	clitest.CodeReply(`r = await runtime.request("peer.result", request_id="req-1", wait_ms=0)
await runtime.request("local.send", text=f"the sum is {r['result']['sum']}")
await runtime.wait(None, reason="done")`),
}

// transcriptOf is session's transcript as the daemon renders it.
func transcriptOf(s *clitest.Served, session string) []struct {
	Role    string `json:"role"`
	Content string `json:"content"`
} {
	var messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	s.Call("GET", "/v1/sessions/"+session+"/transcript", "", 200, &messages)
	return messages
}

// hasMessage says whether messages hold one of role whose content has a line that
// begins with prefix and contains part, followed by text.
func hasMessage(messages []struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}, role, label, text string) bool {
	for _, m := range messages {
		head, body, _ := strings.Cut(m.Content, "\n")
		if m.Role == role && strings.HasPrefix(head, "[") && strings.HasSuffix(head, " · "+label+"]") && body == text {
			return true
		}
	}
	return false
}

// peerKinds are the peer records of session's log, in order.
func peerKinds(t *testing.T, dir, session string) []string {
	t.Helper()
	var kinds []string
	for _, e := range clitest.KilnJSON[journal.LogEntry](t, "log", "--session", session, "--data", dir, "--json") {
		if strings.HasPrefix(string(e.Kind), "peer.") {
			kinds = append(kinds, string(e.Kind))
		}
	}
	return kinds
}

// A parent agent on a script route opens a peer, sends it a request and waits; the
// peer's agent answers; the parent wakes on the result and says it. Every step is in
// both records, framed in both transcripts as the spec frames peer inputs.
func TestPeersOfAnAgent(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t, peerScript...)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	s.Call("POST", "/v1/sessions/boss/inputs", `{"text":"add 2 and 3 with a peer"}`, 201, nil)
	ends := 0
	clitest.FollowUntil(t, dir, "boss", 0, func(e client.Event) bool {
		if e.Kind == "turn.end" {
			ends++
		}
		return ends == 2
	})

	boss, peer := transcriptOf(s, "boss"), transcriptOf(s, "boss.p1")
	if !hasMessage(peer, "user", "peer request req-1 from boss", "add 2 and 3") {
		t.Errorf("the peer's transcript does not frame the request:\n%v", peer)
	}
	if !hasMessage(boss, "user", "peer result req-1 from boss.p1", `{"sum":5}`) {
		t.Errorf("the parent's transcript does not frame the result:\n%v", boss)
	}
	var said bool
	for _, e := range clitest.KilnJSON[journal.LogEntry](t, "log", "--session", "boss", "--data", dir, "--json") {
		if in, ok := e.Record.(map[string]any); ok && e.Kind == journal.EntryInput && in["source"] == "agent" {
			said = strings.Contains(string(mustJSON(t, in["payload"])), "the sum is 5")
		}
	}
	if !said {
		t.Error("the parent did not say the sum")
	}
	want := "peer.opened peer.request peer.result"
	for _, session := range []string{"boss", "boss.p1"} {
		if got := strings.Join(peerKinds(t, dir, session), " "); got != want {
			t.Errorf("%s's peer records: %s; want %s", session, got, want)
		}
	}
	var tree struct {
		Peers []struct {
			PeerID       string `json:"peer_id"`
			State        string `json:"state"`
			Requests     int    `json:"requests"`
			Turns        int    `json:"turns"`
			OpenRequests []any  `json:"open_requests"`
			Usage        struct {
				Calls int `json:"calls"`
			} `json:"usage"`
		} `json:"peers"`
	}
	s.Call("GET", "/v1/sessions/boss/peers", "", 200, &tree)
	var shown struct {
		ID    string `json:"id"`
		Peers []struct {
			PeerID string `json:"peer_id"`
			Peers  []any  `json:"peers"`
		} `json:"peers"`
	}
	if err := json.Unmarshal([]byte(clitest.Out(t, "sessions", "show", "boss", "--data", dir)), &shown, json.RejectUnknownMembers(false)); err != nil ||
		shown.ID != "boss" || len(shown.Peers) != 1 || shown.Peers[0].PeerID != "boss.p1" {
		t.Errorf("kiln sessions show boss: %+v %v", shown, err)
	}
	if out := clitest.Out(t, "transcript", "show", "boss.p1", "--data", dir); !strings.Contains(out, " · peer request req-1 from boss]\nadd 2 and 3") {
		t.Errorf("kiln transcript show boss.p1:\n%s", out)
	}
	if len(tree.Peers) != 1 || tree.Peers[0].PeerID != "boss.p1" || tree.Peers[0].State != "waiting" || tree.Peers[0].Requests != 1 || tree.Peers[0].Turns != 1 ||
		len(tree.Peers[0].OpenRequests) != 0 || tree.Peers[0].Usage.Calls != 1 {
		t.Errorf("GET /v1/sessions/boss/peers: %+v", tree)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Without a model route, peers still work: a client reads the peer's input from its
// events and answers by running peer.submit_result in it.
func TestPeersDrivenByCode(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/boss/executions", `{"code":"p = await runtime.request(\"agents.open\", mode=\"independent\", evidence=[])\n`+
		`r = await runtime.request(\"peer.message\", peer_id=p[\"peer_id\"], request_id=\"q\", content=\"what is 6 * 7?\", evidence=[])\n`+
		`print(p[\"peer_id\"], r[\"state\"])"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "boss.p1 submitted\n" {
		t.Fatalf("open and send: %+v", rec)
	}
	input := clitest.FollowUntil(t, dir, "boss.p1", 0, func(e client.Event) bool { return e.Kind == "event" })
	var ev struct {
		Record struct {
			Source  string `json:"source"`
			Payload struct {
				Text    string `json:"text"`
				Request struct {
					ID      string `json:"id"`
					Session string `json:"session"`
				} `json:"peer_request"`
			} `json:"payload"`
		} `json:"record"`
	}
	if err := json.Unmarshal(input.Raw, &ev, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	if ev.Record.Source != "peer" || ev.Record.Payload.Text != "what is 6 * 7?" || ev.Record.Payload.Request.ID != "q" ||
		ev.Record.Payload.Request.Session != "boss" {
		t.Fatalf("the peer's input: %s", input.Raw)
	}
	s.Call("POST", "/v1/sessions/boss.p1/executions", `{"code":"await runtime.request(\"peer.submit_result\", request_id=\"q\", result=6 * 7)"}`, 200, &rec)
	if rec.Status != "ok" {
		t.Fatalf("submit: %+v", rec)
	}
	s.Call("POST", "/v1/sessions/boss/executions", `{"code":"r = await runtime.request(\"peer.result\", request_id=\"q\", wait_ms=10000)\nprint(r[\"state\"], r[\"result\"])"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "completed 42\n" {
		t.Fatalf("the result: %+v", rec)
	}
	if got := strings.Join(peerKinds(t, dir, "boss.p1"), " "); got != "peer.opened peer.request peer.result" {
		t.Errorf("the peer's records: %s", got)
	}
}

// A daemon killed with SIGKILL while its peer works on two requests: after the restart
// both are intact and working, the peer's turn ended host_died once, and the parent
// cancels one and gets the other's result, which the peer submits later.
func TestPeerRequestsSurviveAKilledDaemon(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t,
		clitest.CodeReply(`me = (await runtime.inspect())["session_id"]
if me == "boss":
    p = await runtime.request("peer.open", mode="independent", evidence=[])
    for r in ("req-1", "req-2"):
        await runtime.request("peer.send", peer_id=p["peer_id"], request_id=r, content="work on " + r, evidence=[])
    await runtime.wait(None, reason="waiting for my peer")
else:
    import time
    time.sleep(600)`),
		clitest.CodeReply(`if (await runtime.inspect())["session_id"] == "boss":
    r = await runtime.request("peer.result", request_id="req-1", wait_ms=0)
    await runtime.request("local.send", text=f"the sum is {r['result']['sum']}")
await runtime.wait(None, reason="done")`))
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	s.Call("POST", "/v1/sessions/boss/inputs", `{"text":"go"}`, 201, nil)
	clitest.FollowUntil(t, dir, "boss", 0, func(e client.Event) bool { return e.Kind == "peer.request" })
	clitest.FollowUntil(t, dir, "boss.p1", 0, func(e client.Event) bool { return e.Kind == "execution" })
	s.Kill(clitest.WaitForChild(t, s.Cmd.Process.Pid))

	s2 := clitest.StartServe(t, dir)
	var died int
	recovered := clitest.FollowUntil(t, dir, "boss.p1", 0, func(e client.Event) bool {
		if e.Kind == "turn.end" && clitest.EndReason(t, e) == "host_died" {
			died++
			return true
		}
		return false
	})
	var rec clitest.ExecRecord
	s2.Call("POST", "/v1/sessions/boss/executions", `{"code":"print([(await runtime.request(\"peer.result\", request_id=r, wait_ms=0))[\"state\"] for r in (\"req-1\", \"req-2\")])"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "['working', 'working']\n" {
		t.Fatalf("the requests after the restart: %+v", rec)
	}
	s2.Call("POST", "/v1/sessions/boss/executions", `{"code":"(await runtime.request(\"peer.cancel\", request_id=\"req-2\"))[\"state\"]"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "'canceled'" {
		t.Fatalf("cancel: %+v", rec)
	}
	// The cancellation wakes the peer, whose turn ends waiting; then a client answers
	// req-1 in it, which wakes the parent, which says the result.
	clitest.FollowUntil(t, dir, "boss.p1", recovered.Seq, func(e client.Event) bool { return e.Kind == "turn.end" })
	s2.Call("POST", "/v1/sessions/boss.p1/executions", `{"code":"await runtime.request(\"peer.submit_result\", request_id=\"req-1\", result={\"sum\": 5})"}`, 200, &rec)
	if rec.Status != "ok" {
		t.Fatalf("the late result: %+v", rec)
	}
	said := clitest.FollowUntil(t, dir, "boss", 0, func(e client.Event) bool {
		return e.Kind == "event" && strings.Contains(string(e.Raw), `"source":"agent"`)
	})
	if !strings.Contains(string(said.Raw), "the sum is 5") {
		t.Fatalf("the parent said: %s", said.Raw)
	}
	var turns []string
	for _, tr := range clitest.KilnJSON[journal.Turn](t, "turns", "boss.p1", "--data", dir, "--json") {
		if tr.End != nil {
			turns = append(turns, string(tr.End.EndReason))
		}
	}
	if died != 1 || len(turns) != 2 || turns[0] != "host_died" || turns[1] != "waited" {
		t.Fatalf("the peer's turns: %+v", turns)
	}
}

// peerCell runs code in session and returns what it printed, failing unless it ran ok.
func peerCell(t *testing.T, s *clitest.Served, session, code string) string {
	t.Helper()
	// The longest wait a request may ask: a cell that opens a peer starts a worker, which
	// can take longer than the default wait on a loaded machine.
	body, _ := json.Marshal(map[string]any{"code": code, "wait_ms": api.MaxWaitMS})
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/"+session+"/executions", string(body), 200, &rec)
	if rec.Status != "ok" {
		t.Fatalf("%s: %q: %+v", session, code, rec)
	}
	var out strings.Builder
	for _, o := range rec.Output {
		out.WriteString(o.Text)
	}
	return out.String()
}

// sessionState is the daemon's state of session.
func sessionState(s *clitest.Served, session string) string {
	var info struct {
		State string `json:"state"`
	}
	s.Call("GET", "/v1/sessions/"+session, "", 200, &info)
	return info.State
}

// Stopping peers through a daemon: without drain the peer's session stops at once and
// its request is canceled; with drain it takes no new request and stops once its open
// one is answered; stopping the parent stops the peers it has left.
func TestStoppingPeers(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	peerCell(t, s, "boss", `for i in range(3):
    p = await runtime.request("peer.open", mode="independent", evidence=[])
    await runtime.request("peer.send", peer_id=p["peer_id"], request_id=f"r{i}", content="wait", evidence=[])`)

	got := peerCell(t, s, "boss", `print((await runtime.request("peer.stop", peer_id="boss.p1", drain=False))["state"])
print((await runtime.request("peer.result", request_id="r0"))["state"])`)
	if got != "stopped\ncanceled\n" || sessionState(s, "boss.p1") != "stopped" {
		t.Fatalf("stop without drain: %q, the session %s", got, sessionState(s, "boss.p1"))
	}

	got = peerCell(t, s, "boss", `print((await runtime.request("peer.stop", peer_id="boss.p2", drain=True))["state"])
try:
    await runtime.request("peer.send", peer_id="boss.p2", request_id="late", content="more", evidence=[])
except Exception as e:
    print(e.code)`)
	if got != "draining\npeer_stopped\n" || sessionState(s, "boss.p2") != "open" {
		t.Fatalf("drain: %q, the session %s", got, sessionState(s, "boss.p2"))
	}
	peerCell(t, s, "boss.p2", `await runtime.request("peer.submit_result", request_id="r1", result="done")`)
	clitest.FollowUntil(t, dir, "boss", 0, func(e client.Event) bool {
		return e.Kind == "peer.stopped" && strings.Contains(string(e.Raw), `"peer_id":"boss.p2"`) &&
			strings.Contains(string(e.Raw), `"reason":"drained`)
	})
	clitest.FollowUntil(t, dir, "boss.p2", 0, func(e client.Event) bool { return e.Kind == "kernel.end" })
	if st := sessionState(s, "boss.p2"); st != "stopped" {
		t.Fatalf("the drained peer is %s", st)
	}

	s.Call("DELETE", "/v1/sessions/boss", "", 200, nil)
	if st := sessionState(s, "boss.p3"); st != "stopped" {
		t.Fatalf("the peer of a stopped parent is %s", st)
	}
	var list struct {
		Peers []struct {
			PeerID     string `json:"peer_id"`
			State      string `json:"state"`
			StopReason string `json:"stop_reason"`
		} `json:"peers"`
	}
	s.Call("GET", "/v1/sessions/boss/peers", "", 200, &list)
	if len(list.Peers) != 3 || list.Peers[2].State != "stopped" || !strings.Contains(list.Peers[2].StopReason, "its parent boss stopped") {
		t.Fatalf("the peers: %+v", list)
	}
}

// A peer is confined like any session of its daemon: under --sandbox workspace it has a
// namespace of its own, and the daemon's record and socket, through which it could reach
// other sessions, are out of its view; it reaches its parent only through peer.*.
func TestAPeerIsConfinedLikeAnySession(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir, "--sandbox", "workspace:best-effort")
	s.Call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	peerCell(t, s, "boss", `secret = 42
p = await runtime.request("peer.open", mode="independent", evidence=[])
await runtime.request("peer.send", peer_id=p["peer_id"], request_id="q", content="hi", evidence=[])`)
	got := peerCell(t, s, "boss.p1", `import os
print("secret" in globals())
print(os.path.exists(`+strconvQuote(dir+"/kiln.sock")+`), os.path.exists(`+strconvQuote(dir+"/kiln.db")+`))
try:
    await runtime.request("peer.get", peer_id="boss")
except Exception as e:
    print(e.code)
print((await runtime.request("peer.submit_result", request_id="q", result="only this way"))["state"])`)
	sandbox := sessionSandbox(t, s, "boss.p1")
	want := "False\nFalse False\nnot_found\ncompleted\n"
	if !strings.Contains(sandbox, "mount") {
		// A kernel that gives no private view of files leaves the socket in view: the
		// best effort says so, and the rest holds.
		want = "False\n" + strings.SplitN(got, "\n", 3)[1] + "\nnot_found\ncompleted\n"
	}
	if got != want {
		t.Fatalf("the peer sees:\n%s\nwant\n%s(sandbox %s)", got, want, sandbox)
	}
	t.Logf("the peer's sandbox: %s", sandbox)
}

// strconvQuote is s as a Python string literal.
func strconvQuote(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}

// sessionSandbox is what runtime.inspect says confines session's generation, as JSON.
func sessionSandbox(t *testing.T, s *clitest.Served, session string) string {
	t.Helper()
	return peerCell(t, s, session, `import json
print(json.dumps((await runtime.inspect()).get("sandbox")))`)
}

// A peer works in a directory of its own, <data>/sessions/<peer>/work, as any session
// of the daemon does: under the workspace profile it cannot read or write its parent's
// files, nor its parent its files; each session's files API serves its own alone.
func TestAPeerCannotReachItsParentsFiles(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir, "--sandbox", "workspace:best-effort")
	s.Call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	parentDir := strings.TrimSpace(peerCell(t, s, "boss", `import os
open("note.txt", "w").write("the parent's")
p = await runtime.request("peer.open", mode="independent", evidence=[])
print(os.getcwd())`))
	if want := filepath.Join(dir, "sessions", "boss", "work"); parentDir != want {
		t.Fatalf("the parent works in %s; want %s", parentDir, want)
	}
	if sandbox := sessionSandbox(t, s, "boss.p1"); !strings.Contains(sandbox, "mount") && !strings.Contains(sandbox, "landlock_abi") {
		t.Skipf("the kernel gives neither a private view of files nor Landlock: %s", sandbox)
	}
	got := peerCell(t, s, "boss.p1", `import os
print(os.getcwd())
open("own.txt", "w").write("the peer's")
for path in [`+strconvQuote(parentDir+"/note.txt")+`, `+strconvQuote(parentDir+"/forged.txt")+`]:
    try:
        open(path, "a").close()
        print("reached", path)
    except OSError as e:
        print(type(e).__name__ in ("FileNotFoundError", "PermissionError"))`)
	peerDir := filepath.Join(dir, "sessions", "boss.p1", "work")
	if want := peerDir + "\nTrue\nTrue\n"; got != want {
		t.Fatalf("the peer:\n%s\nwant\n%s", got, want)
	}
	if got := peerCell(t, s, "boss", `try:
    open(`+strconvQuote(peerDir+"/own.txt")+`).read()
except OSError as e:
    print(type(e).__name__ in ("FileNotFoundError", "PermissionError"))`); got != "True\n" {
		t.Fatalf("the parent reads the peer's file: %q", got)
	}
	s.Call("GET", "/v1/sessions/boss.p1/files/own.txt", "", 200, nil)
	s.Call("GET", "/v1/sessions/boss/files/own.txt", "", 404, nil)
	s.Call("GET", "/v1/sessions/boss.p1/files/note.txt", "", 404, nil)
	if _, err := os.Stat(filepath.Join(parentDir, "forged.txt")); !os.IsNotExist(err) {
		t.Fatalf("the peer made a file in its parent's directory: %v", err)
	}
}
