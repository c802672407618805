package peertests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/journal"
)

// tryPeer defines, in a session's namespace, try_(method, **params): the code of the
// request's refusal (the exception's name, raised before it was sent), or "ok".
const tryPeer = `async def try_(method, **params):
    try:
        await runtime.request(method, **params)
        return "ok"
    except Exception as e:
        return getattr(e, "code", type(e).__name__)
`

// Every bound of peer.* holds through a daemon, for cells of real Python workers: each
// at its limit and one past. So do its rules: idempotent sends and results and their
// conflicts, a cancel before the peer took the request, and a question answered with
// evidence, which the request's record then holds.
func TestPeerBoundsAndRulesThroughADaemon(t *testing.T) {
	t.Parallel() // its own daemon and data directory
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	for _, id := range []string{"many", "deep", "busy", "big", "rules"} {
		s.Call("POST", "/v1/sessions", `{"id":"`+id+`"}`, 201, nil)
		peerCell(t, s, id, tryPeer)
	}
	open := `await try_("peer.open", mode="independent", evidence=[])`

	// MaxPeers open peers; one more is refused until one stops.
	got := peerCell(t, s, "many", fmt.Sprintf(`print([%s for _ in range(%d)].count("ok"), %s)
await runtime.request("peer.stop", peer_id="many.p1", drain=False)
print(%s)`, open, peer.MaxPeers, open, open))
	if want := fmt.Sprintf("%d %s\nok\n", peer.MaxPeers, peer.CodePeerLimit); got != want {
		t.Errorf("peers: %q; want %q", got, want)
	}

	// Peers of peers MaxDepth deep; the deepest opens none.
	session := "deep"
	for depth := 1; depth <= peer.MaxDepth; depth++ {
		if got := peerCell(t, s, session, `print((await runtime.request("peer.open", mode="independent", evidence=[]))["peer_id"])`); got != session+".p1\n" {
			t.Fatalf("a peer of depth %d: %q", depth, got)
		}
		session += ".p1"
	}
	if got := peerCell(t, s, session, tryPeer+"print("+open+")"); got != peer.CodeDepthLimit+"\n" {
		t.Errorf("a peer of the deepest peer: %q", got)
	}

	// MaxOpenRequests open requests to one peer; one more is refused until one ends.
	got = peerCell(t, s, "busy", fmt.Sprintf(`p = (await runtime.request("peer.open", mode="independent", evidence=[]))["peer_id"]
codes = [await try_("peer.send", peer_id=p, request_id=f"r{i}", content="wait", evidence=[]) for i in range(%d)]
print(codes.count("ok"), codes[-1])`, peer.MaxOpenRequests+1))
	if want := fmt.Sprintf("%d %s\n", peer.MaxOpenRequests, peer.CodeOpenRequestLimit); got != want {
		t.Errorf("open requests: %q; want %q", got, want)
	}
	peerCell(t, s, "busy.p1", `await runtime.request("peer.submit_result", request_id="r0", result="done")`)
	if got := peerCell(t, s, "busy", fmt.Sprintf(`print(await try_("peer.send", peer_id="busy.p1", request_id="r%d", content="wait", evidence=[]))`,
		peer.MaxOpenRequests)); got != "ok\n" {
		t.Errorf("a request once one ended: %q", got)
	}

	// Content, evidence, results and waits, each at its bound and one past. Content is
	// counted in bytes of UTF-8, not characters.
	var first clitest.ExecRecord
	s.Call("POST", "/v1/sessions/big/executions", fmt.Sprintf(`{"code":"p = await runtime.request(\"peer.open\", mode=\"independent\", evidence=[])","wait_ms":%d}`, api.MaxWaitMS), 200, &first)
	cell := first.ID[strings.LastIndex(first.ID, ":")+1:] // the HTTP id is <session>:<cell>
	got = peerCell(t, s, "big", fmt.Sprintf(`def send(rid, content, evidence=[]):
    return try_("peer.send", peer_id=p["peer_id"], request_id=rid, content=content, evidence=evidence)
refs = ["execution:%s"] * %d
print(await send("c-at", "a" * %d), await send("c-past", "a" * %d))
print(await send("u-at", "é" * %d), await send("u-past", "é" * %d + "a"))
print(await send("e-at", "x", refs), await send("e-past", "x", refs + refs[:1]))
print(await try_("peer.open", mode="independent", evidence=refs), await try_("peer.open", mode="independent", evidence=refs + refs[:1]))
for rid in ("r-at", "r-past", "inline-at", "inline-past"):
    await send(rid, "answer")`, cell, peer.MaxEvidenceRefs, peer.MaxContentBytes, peer.MaxContentBytes+1,
		peer.MaxContentBytes/2, peer.MaxContentBytes/2))
	if want := "ok invalid_request\nok invalid_request\nok invalid_request\nok invalid_request\n"; got != want {
		t.Errorf("content and evidence: %q; want %q", got, want)
	}
	// A result's JSON is a string of n characters and its two quotes.
	got = peerCell(t, s, "big.p1", tryPeer+fmt.Sprintf(`def submit(rid, n):
    return try_("peer.submit_result", request_id=rid, result="a" * n)
print(await submit("r-at", %d), await submit("r-past", %d))
print(await submit("inline-at", %d), await submit("inline-past", %d))`,
		peer.MaxResultBytes-2, peer.MaxResultBytes-1, peer.MaxInlineResultBytes-2, peer.MaxInlineResultBytes-1))
	if got != "ok invalid_request\nok ok\n" {
		t.Errorf("results: %q", got)
	}
	got = peerCell(t, s, "big", fmt.Sprintf(`r = await runtime.request("peer.result", request_id="r-at", wait_ms=%d)
print(r["state"], len(r["result"]), await try_("peer.result", request_id="r-at", wait_ms=%d))`, peer.MaxWaitMS, peer.MaxWaitMS+1))
	if want := fmt.Sprintf("completed %d invalid_request\n", peer.MaxResultBytes-2); got != want {
		t.Errorf("the largest result and waits: %q; want %q", got, want)
	}
	// The parent's input carries a result of MaxInlineResultBytes, and names a larger one.
	texts := map[string]string{}
	clitest.FollowUntil(t, dir, "big", 0, func(e client.Event) bool {
		var ev struct {
			Record struct {
				Payload struct {
					Text   string `json:"text"`
					Result struct {
						ID string `json:"id"`
					} `json:"peer_result"`
				} `json:"payload"`
			} `json:"record"`
		}
		if e.Kind == "event" && json.Unmarshal(e.Raw, &ev, json.RejectUnknownMembers(false)) == nil {
			texts[ev.Record.Payload.Result.ID] = ev.Record.Payload.Text
		}
		return len(texts["inline-past"]) > 0
	})
	if at := texts["inline-at"]; len(at) != peer.MaxInlineResultBytes || !strings.HasPrefix(at, `"aaa`) {
		t.Errorf("the parent's input of a result at the inline bound: %.40q… (%d bytes)", at, len(at))
	}
	if past, want := texts["inline-past"], fmt.Sprintf("(a result of %d bytes: read it with peer.result)", peer.MaxInlineResultBytes+1); past != want {
		t.Errorf("the parent's input of a result past the inline bound: %q; want %q", past, want)
	}

	peerRules(t, s, dir)
}

// peerRules checks the rules of requests through the daemon s on dir, from session
// "rules", whose namespace has try_.
func peerRules(t *testing.T, s *clitest.Served, dir string) {
	got := peerCell(t, s, "rules", `p = (await runtime.request("peer.open", mode="independent", evidence=[]))["peer_id"]
a = await runtime.request("peer.send", peer_id=p, request_id="q", content="fix the bug", evidence=[])
b = await runtime.request("peer.send", peer_id=p, request_id="q", content="fix the bug", evidence=[])
print(a == b, await try_("peer.send", peer_id=p, request_id="q", content="other", evidence=[]))
await runtime.request("peer.send", peer_id=p, request_id="gone", content="never mind", evidence=[])
await runtime.request("peer.send", peer_id=p, request_id="u", content="say a smile", evidence=[])
c = await runtime.request("peer.cancel", request_id="gone")
print(c["state"], c["note"].startswith("cancel requested while submitted"))`)
	if want := "True conflict\ncanceled True\n"; got != want {
		t.Fatalf("sends and a cancel: %q; want %q", got, want)
	}
	got = peerCell(t, s, "rules.p1", tryPeer+`print(await try_("peer.submit_result", request_id="gone", result=1))
r = await runtime.request("peer.submit_result", request_id="q", result="which file?", state="input_required")
print(r["state"], await try_("peer.submit_result", request_id="q", result="which file?", state="input_required"),
      await try_("peer.submit_result", request_id="q", result="done"))`)
	if want := "canceled\ninput_required ok conflict\n"; got != want {
		t.Fatalf("the peer's answers: %q; want %q", got, want)
	}
	// A result is UTF-8: one holding a lone surrogate is not recorded (the runtime
	// cannot encode it, or the host refuses it), and the request waits for another.
	got = peerCell(t, s, "rules.p1", `print(await try_("peer.submit_result", request_id="u", result={"face": "\ud83d"}) != "ok",
      await try_("peer.submit_result", request_id="u", result={"face": "\U0001F600"}))`)
	if got != "True ok\n" {
		t.Fatalf("results of a lone surrogate, then of a character: %q", got)
	}
	if got := peerCell(t, s, "rules", `print((await runtime.request("peer.result", request_id="u"))["result"]["face"] == "\U0001F600")`); got != "True\n" {
		t.Fatalf("the result of a character past the BMP: %q", got)
	}
	// The parent answers the question citing the input that asked it.
	asked := clitest.FollowUntil(t, dir, "rules", 0, func(e client.Event) bool {
		return e.Kind == "event" && strings.Contains(string(e.Raw), `"peer_result":{"id":"q"`)
	})
	var ev struct {
		Record struct {
			ID int64 `json:"id"`
		} `json:"record"`
	}
	if err := json.Unmarshal(asked.Raw, &ev, json.RejectUnknownMembers(false)); err != nil || ev.Record.ID == 0 {
		t.Fatalf("the question's input: %s %v", asked.Raw, err)
	}
	ref := fmt.Sprintf("event:%d", ev.Record.ID)
	if got := peerCell(t, s, "rules", `print((await runtime.request("peer.send", peer_id=p, request_id="q", content="main.go", evidence=["`+ref+`"]))["state"])`); got != "submitted\n" {
		t.Fatalf("the answer: %q", got)
	}
	var evidence []string
	for _, e := range clitest.KilnJSON[journal.LogEntry](t, "log", "--session", "rules.p1", "--data", dir, "--json") {
		if e.Kind != journal.EntryPeerRequest {
			continue
		}
		var body struct {
			Body struct {
				Evidence []string `json:"evidence"`
			} `json:"body"`
		}
		if err := json.Unmarshal(mustJSON(t, e.Record), &body, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		evidence = append(evidence, fmt.Sprint(body.Body.Evidence))
	}
	if got, want := strings.Join(evidence, " "), "[] [] [] ["+ref+"]"; got != want {
		t.Errorf("the evidence of the peer's peer.request records (q, gone, u, q answered): %s; want %s", got, want)
	}
	got = peerCell(t, s, "rules.p1", `print((await runtime.request("peer.submit_result", request_id="q", result="fixed"))["state"],
      await try_("peer.submit_result", request_id="q", result="fixed"), await try_("peer.submit_result", request_id="q", result="other"))`)
	if want := "completed ok conflict\n"; got != want {
		t.Errorf("the result of the answered question: %q; want %q", got, want)
	}
	// peer.get says what the peer does: idle, working while a cell of it runs, stopped.
	state := `print((await runtime.request("peer.get", peer_id="rules.p1"))["state"])`
	if got := peerCell(t, s, "rules", state); got != "idle\n" {
		t.Errorf("an idle peer: %q", got)
	}
	var long clitest.ExecRecord
	s.Call("POST", "/v1/sessions/rules.p1/executions", `{"code":"import time\ntime.sleep(600)","wait_ms":0}`, 202, &long)
	if got := peerCell(t, s, "rules", state); got != "working\n" {
		t.Errorf("a peer running a cell: %q", got)
	}
	if got := peerCell(t, s, "rules", `await runtime.request("peer.stop", peer_id="rules.p1", drain=False)
`+state); got != "stopped\n" {
		t.Errorf("a stopped peer: %q", got)
	}
	s.Call("GET", "/v1/executions/"+long.ID, "", 200, &long)
	if long.Status != "interrupted" {
		t.Errorf("the cell running as its peer stopped: %+v", long)
	}
}

// A peer's model calls count toward its parent's session cost cap: a parent that spent
// nothing itself, whose peer spent the cap, ends its next turn cost_cap before a call.
func TestAPeersCostCountsTowardItsParentsCap(t *testing.T) {
	t.Parallel() // its own daemon and data directory
	// Every session reads the script from its start; the parent never calls, so this
	// is the peer's reply, priced at half a dollar (500,000 tokens at $1 per million).
	dir := clitest.AgentDir(t, `{"code":"await runtime.request(\"peer.submit_result\", request_id=\"q\", result=1)\nawait runtime.wait(None, reason=\"answered\")",`+
		`"usage":{"prompt_tokens":500000,"completion_tokens":0}}`)
	cfg, err := os.OpenFile(filepath.Join(dir, "kiln.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.WriteString("max_session_cost_usd = 0.5\n"); err != nil {
		t.Fatal(err)
	}
	cfg.Close()
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"boss"}`, 201, nil)
	peerCell(t, s, "boss", `p = await runtime.request("peer.open", mode="independent", evidence=[])
await runtime.request("peer.send", peer_id=p["peer_id"], request_id="q", content="answer 1", evidence=[])`)
	// The peer's result wakes the parent, whose turn ends at once.
	clitest.FollowUntil(t, dir, "boss", 0, func(e client.Event) bool { return e.Kind == "turn.end" })
	turns := clitest.KilnJSON[journal.Turn](t, "turns", "boss", "--data", dir, "--json")
	if len(turns) != 1 || turns[0].End == nil || turns[0].End.EndReason != journal.TurnCostCap || len(turns[0].Calls) != 0 ||
		!strings.Contains(turns[0].End.Detail, "session: 500000 µ$ charged of 500000") {
		t.Fatalf("the parent's turns: %s", mustJSON(t, turns))
	}
	peerTurns := clitest.KilnJSON[journal.Turn](t, "turns", "boss.p1", "--data", dir, "--json")
	if len(peerTurns) != 1 || peerTurns[0].End == nil || peerTurns[0].End.EndReason != journal.TurnWaited {
		t.Fatalf("the peer's turns: %s", mustJSON(t, peerTurns))
	}
}
