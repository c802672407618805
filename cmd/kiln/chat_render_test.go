package main

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
)

func TestRenderChat(t *testing.T) {
	var b strings.Builder
	for _, raw := range []string{
		`{"seq":1,"kind":"event","record":{"source":"operator","payload":{"text":"hi"}}}`,
		`{"seq":2,"kind":"event","record":{"source":"agent","payload":{"text":"hello"}}}`,
		`{"seq":3,"kind":"receipt","record":{"kind":"local.send","detail":{"text":"secret"},"receipt":{"status":"held","reason":"names a password"}}}`,
		`{"seq":4,"kind":"receipt","record":{"kind":"local.send","detail":{"text":"fine"},"receipt":{"status":"confirmed","reason":null}}}`,
		`{"seq":5,"kind":"model_call","record":{"kind":"model_call","body":{"turn":1,"purpose":"step","route":"main","error":"route: call failed after 3 attempts: 500"}}}`,
		`{"seq":6,"kind":"turn.end","record":{"kind":"turn.end","body":{"turn":1,"end_reason":"model_error","steps":1,"detail":"500"}}}`,
	} {
		var e client.Event
		if err := json.Unmarshal([]byte(raw), &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		e.Raw = []byte(raw)
		renderChat(&b, e)
	}
	want := "agent: hello\nheld (names a password): secret\n· turn 1: step call to main failed: route: call failed after 3 attempts: 500\n· turn 1 ended model_error after 1 steps: 500\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestChatShowsPeerRecords(t *testing.T) {
	var b strings.Builder
	for _, raw := range []string{
		`{"seq":1,"kind":"peer.opened","record":{"kind":"peer.opened","body":{"peer_id":"boss.p1","parent":"boss","mode":"independent","depth":1}}}`,
		`{"seq":2,"kind":"peer.request","record":{"kind":"peer.request","body":{"peer_id":"boss.p1","parent":"boss","request_id":"req-1","state":"submitted"}}}`,
		`{"seq":3,"kind":"peer.result","record":{"kind":"peer.result","body":{"peer_id":"boss.p1","parent":"boss","request_id":"req-1","state":"completed","result_bytes":9}}}`,
		`{"seq":4,"kind":"peer.result","record":{"kind":"peer.result","body":{"peer_id":"boss.p1","parent":"boss","request_id":"req-2","state":"canceled","detail":"canceled by boss while working"}}}`,
		`{"seq":5,"kind":"peer.stopped","record":{"kind":"peer.stopped","body":{"peer_id":"boss.p1","parent":"boss","state":"stopped","reason":"stopped by boss"}}}`,
	} {
		var e client.Event
		if err := json.Unmarshal([]byte(raw), &e, json.RejectUnknownMembers(false)); err != nil {
			t.Fatal(err)
		}
		e.Raw = []byte(raw)
		renderChat(&b, e)
	}
	want := `· peer boss.p1 opened by boss
· peer request req-1: boss → boss.p1
· peer result req-1: boss.p1 → boss, completed
· peer result req-2: boss.p1 → boss, canceled (canceled by boss while working)
· peer boss.p1 stopped: stopped by boss
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
