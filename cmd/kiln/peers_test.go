package main

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
)

// peerScript is one script every session of the daemon reads from its start: the
// parent opens a peer, sends it a request and waits; the peer answers and waits; the
// parent, woken by the result, says it.
var peerScript = []string{
	codeReply(`me = (await runtime.inspect())["session_id"]
if me == "boss":
    p = await runtime.request("peer.open", mode="independent", evidence=[])
    await runtime.request("peer.send", peer_id=p["peer_id"], request_id="req-1", content="add 2 and 3", evidence=[])
    await runtime.wait(None, reason="waiting for my peer")
else:
    await runtime.request("peer.submit_result", request_id="req-1", result={"sum": 2 + 3})
    await runtime.wait(None, reason="answered")`),
	codeReply(`r = await runtime.request("peer.result", request_id="req-1", wait_ms=0)
await runtime.request("local.send", text=f"the sum is {r['result']['sum']}")
await runtime.wait(None, reason="done")`),
}

// transcriptOf is session's transcript as the daemon renders it.
func transcriptOf(s *served, session string) []struct {
	Role    string `json:"role"`
	Content string `json:"content"`
} {
	var messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	s.call("GET", "/v1/sessions/"+session+"/transcript", "", 200, &messages)
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
	for _, e := range kilnJSON[kiln.LogEntry](t, "log", "--session", session, "--data", dir, "--json") {
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
	dir := agentDir(t, peerScript...)
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	s.call("POST", "/v1/sessions/boss/inputs", `{"text":"add 2 and 3 with a peer"}`, 201, nil)
	ends := 0
	followUntil(t, dir, "boss", 0, func(e kiln.Event) bool {
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
	for _, e := range kilnJSON[kiln.LogEntry](t, "log", "--session", "boss", "--data", dir, "--json") {
		if in, ok := e.Record.(map[string]any); ok && e.Kind == kiln.EntryInput && in["source"] == "agent" {
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
	s.call("GET", "/v1/sessions/boss/peers", "", 200, &tree)
	if len(tree.Peers) != 1 || tree.Peers[0].PeerID != "boss.p1" || tree.Peers[0].Requests != 1 || tree.Peers[0].Turns != 1 ||
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
	dir := shortTemp(t)
	s := startServe(t, dir)
	s.call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	var rec execRecord
	s.call("POST", "/v1/sessions/boss/executions", `{"code":"p = await runtime.request(\"agents.open\", mode=\"independent\", evidence=[])\n`+
		`r = await runtime.request(\"peer.message\", peer_id=p[\"peer_id\"], request_id=\"q\", content=\"what is 6 * 7?\", evidence=[])\n`+
		`print(p[\"peer_id\"], r[\"state\"])"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "boss.p1 submitted\n" {
		t.Fatalf("open and send: %+v", rec)
	}
	input := followUntil(t, dir, "boss.p1", 0, func(e kiln.Event) bool { return e.Kind == "event" })
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
	s.call("POST", "/v1/sessions/boss.p1/executions", `{"code":"await runtime.request(\"peer.submit_result\", request_id=\"q\", result=6 * 7)"}`, 200, &rec)
	if rec.Status != "ok" {
		t.Fatalf("submit: %+v", rec)
	}
	s.call("POST", "/v1/sessions/boss/executions", `{"code":"r = await runtime.request(\"peer.result\", request_id=\"q\", wait_ms=10000)\nprint(r[\"state\"], r[\"result\"])"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "completed 42\n" {
		t.Fatalf("the result: %+v", rec)
	}
	if got := strings.Join(peerKinds(t, dir, "boss.p1"), " "); got != "peer.opened peer.request peer.result" {
		t.Errorf("the peer's records: %s", got)
	}
}
