package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// TestPartialCode decodes the code of arguments cut anywhere, as far as they go.
func TestPartialCode(t *testing.T) {
	full := `{"code": "print(\"h\u00e9\")\nx = 1\\n"}`
	for i := range len(full) + 1 {
		got := partialCode(full[:i])
		if want := "print(\"hé\")\nx = 1\\n"; !strings.HasPrefix(want, got) {
			t.Fatalf("cut at %d: %q is not a start of %q", i, got, want)
		}
	}
	if got := partialCode(full); got != "print(\"hé\")\nx = 1\\n" {
		t.Errorf("whole: %q", got)
	}
}

// TestTheModelStreamsLive: while a call runs, a session's stream with deltas carries its
// text and arguments as model.delta events before the call's record, joining into what
// the record keeps; a stream without them carries none; the stream of every session
// with deltas carries them too; kiln chat prints the model's text and its code.
func TestTheModelStreamsLive(t *testing.T) {
	t.Parallel()
	code := "await runtime.request(\"local.send\", text=\"hi\")\nawait runtime.wait(None, reason=\"done\")"
	srv := routetest.New(t, routetest.Anthropic,
		routetest.Step{Text: "I will greet the operator.", Code: routetest.Code(code)},
		routetest.Step{Text: "Again.", Code: routetest.Code(code)})
	dir := clitest.ShortTemp(t)
	clitest.WriteConfig(t, dir, "[routes.a]\nkind = \"anthropic\"\nbase_url = \""+srv.URL+"\"\nmodel = \"claude-test\"\ncontext_tokens = 200000\n\n[agent]\nroute = \"a\"\n")
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"l"}`, 201, nil)
	d, err := client.DialDaemon(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var text, args strings.Builder
	var recorded, deltas bool
	sent := false
	err = d.EventsLive(t.Context(), "l", 0, func(e client.Event) error {
		if !sent { // the input goes once the stream follows: the pieces before it are not its
			sent = true
			if _, err := d.Send(t.Context(), "l", "greet"); err != nil {
				return err
			}
		}
		switch e.Kind {
		case "model.delta":
			deltas = true
			if recorded {
				t.Errorf("a piece after its call's record: %s", e.Raw)
			}
			var p struct {
				Delta string `json:"delta"`
				Text  string `json:"text"`
			}
			jsonInto(t, e.Raw, &p)
			if p.Delta == "text" {
				text.WriteString(p.Text)
			} else {
				args.WriteString(p.Text)
			}
		case "model_call":
			recorded = true
		case "turn.end":
			return clitest.ErrFound
		}
		return nil
	})
	if err != clitest.ErrFound || !deltas {
		t.Fatalf("the stream: %v, pieces %v", err, deltas)
	}
	if text.String() != "I will greet the operator." || partialCode(args.String()) != code {
		t.Errorf("the pieces joined: %q, code %q", text.String(), partialCode(args.String()))
	}
	for _, e := range clitest.Follow(t, dir, "l", 0, "turn.end") {
		if e.Kind == "model.delta" {
			t.Fatal("a stream without deltas=1 carried one")
		}
	}

	// The stream of every session carries the pieces too, naming their session.
	ready, every := make(chan struct{}), make(chan string, 1)
	bounded, stop := context.WithTimeout(t.Context(), 2*time.Minute) // a hang's bound, not a timing claim
	defer stop()
	go func() {
		var seen strings.Builder
		first := true
		d.EventsLive(bounded, "", 0, func(e client.Event) error {
			if first { // the stream follows: the pieces published from now on are its
				first = false
				close(ready)
			}
			var p struct {
				Session string `json:"session"`
				Delta   string `json:"delta"`
				Text    string `json:"text"`
			}
			json.Unmarshal(e.Raw, &p, json.RejectUnknownMembers(false))
			switch {
			case e.Kind == "model.delta" && p.Session == "l" && p.Delta == "text":
				seen.WriteString(p.Text)
			case e.Kind == "model_call" && seen.Len() > 0:
				return clitest.ErrFound
			}
			return nil
		})
		every <- seen.String()
	}()
	select {
	case <-ready:
	case <-bounded.Done():
		t.Fatal("the stream of every session did not begin")
	}
	cmd := clitest.Command(t, "chat", "l", "--data", dir)
	cmd.Stdin = strings.NewReader("again\n")
	out, err := cmd.CombinedOutput()
	if got := <-every; got != "Again." {
		t.Errorf("the stream of every session carried %q", got)
	}
	if err != nil || !strings.Contains(string(out), "model: Again.\n") || !strings.Contains(string(out), "  | await runtime.wait(None, reason=\"done\")\n") {
		t.Errorf("kiln chat: %v\n%s", err, out)
	}
}

// jsonInto decodes an event's record-less members into v.
func jsonInto(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v, json.RejectUnknownMembers(false)); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
}
