package agentrun_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/agentrun/agentruntest"
	"github.com/kilnrt/kiln/internal/route/routetest"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
)

// agentWorkbench opens a workbench of a data directory whose kiln.toml runs the agent
// on a script route of replies, and starts its agent; ends receives each turn's end.
func agentWorkbench(t *testing.T, route string, replies ...string) (*session.Session, string, chan agentrun.Progress) {
	t.Helper()
	return agentWorkbenchOn(t, "[routes.test]\nkind = \"script\"\nscript = \"replies.jsonl\"\n"+route, replies...)
}

// agentWorkbenchOn is agentWorkbench with a route of its own.
func agentWorkbenchOn(t *testing.T, routes string, replies ...string) (*session.Session, string, chan agentrun.Progress) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := routes + "\n[agent]\nroute = \"test\"\nfold_margin_tokens = 500\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "replies.jsonl"), []byte(strings.Join(replies, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wb, ends, stop := agentruntest.Start(t, dir)
	t.Cleanup(stop)
	return wb, dir, ends
}

func TestAgentFoldMovesTheHead(t *testing.T) {
	wb, dir, ends := agentWorkbench(t, "context_tokens = 2000",
		`{"code":"await runtime.wait(None)","usage":{"prompt_tokens":1900,"completion_tokens":10}}`,
		`{"text":"Goal: wait.\nProgress: waited once.\nDecisions: none.\nNext steps: wait again.\nFiles: none."}`,
		`{"code":"await runtime.wait(None)"}`)
	for _, text := range []string{"first", "second"} {
		if _, err := wb.Input(t.Context(), text); err != nil {
			t.Fatal(err)
		}
		if p := <-ends; p.End != agent.EndWaited {
			t.Fatalf("after %q: %+v", text, p)
		}
	}
	st, err := store.OpenDir(t.Context(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.SessionByName(t.Context(), "root")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Load(t.Context(), st, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var pins []*transcript.Pin
	for _, l := range tr.Links() {
		if l.Pin != nil {
			pins = append(pins, l.Pin)
		}
	}
	if len(pins) != 2 || pins[0].Reason != transcript.ReasonSessionStart || pins[1].Reason != transcript.ReasonFold || pins[1].FrontierSeq == 0 {
		t.Fatalf("pins %+v", pins)
	}
	turns, err := agent.Journal{Store: st, Session: sess.ID}.Turns(t.Context())
	if err != nil || len(turns) != 2 || len(turns[1].Folds) != 1 || turns[1].Folds[0].HeadReason != transcript.ReasonFold ||
		turns[1].Calls[0].Purpose != agent.PurposeFold || turns[1].Folds[0].HeaderAfter != pins[1].Digest {
		t.Fatalf("turns %+v, %v", turns, err)
	}
	// What a model reads of the transcript starts at the fold's frontier: "first" is
	// covered, "second" is not.
	rendered := tr.Render()
	var all strings.Builder
	for _, m := range rendered {
		all.WriteString(m.Content)
	}
	if strings.Contains(all.String(), "first") || !strings.Contains(all.String(), "second") {
		t.Errorf("the rendered transcript after the fold:\n%s", all.String())
	}
}

// A header change a cell makes renders where it was noticed, as that cell's; the system
// text stays.
func TestAgentRendersAHeaderChangeWhereNoticed(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat,
		routetest.Step{Code: routetest.Code(`open("AGENTS.md", "w").write("Never push on Fridays.\n")`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None)`)})
	wb, _, ends := agentWorkbenchOn(t, fmt.Sprintf("[routes.test]\nkind = \"openai-chat\"\nbase_url = %q\nmodel = \"m\"\n", srv.URL))
	if _, err := wb.Input(t.Context(), "write the rules"); err != nil {
		t.Fatal(err)
	}
	if p := <-ends; p.End != agent.EndWaited {
		t.Fatalf("%+v", p)
	}
	bodies := srv.Bodies()
	_, c0, _ := routetest.Conversation(routetest.OpenAIChat, bodies[0])
	h1, c1, _ := routetest.Conversation(routetest.OpenAIChat, bodies[1])
	if !bytes.HasPrefix(c1, c0) {
		t.Fatal("the second request does not extend the first")
	}
	notice := c1[len(c0):]
	// The text was unchanged as the cell started and changed as it ended: the cell's.
	if !bytes.Contains(notice, []byte("instructions changed for this runtime · changed by execution c-1]")) ||
		!bytes.Contains(notice, []byte(`+Never push on Fridays.\n`)) || bytes.Contains(h1, []byte("Fridays")) {
		t.Errorf("what the second request added:\n%s", notice)
	}
}

// A restarted agent goes on with the conversation its session's record holds.
func TestAgentResumesTheConversation(t *testing.T) {
	srv := routetest.New(t, routetest.OpenAIChat,
		routetest.Step{Code: routetest.Code("x = 42")},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None)`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None)`)})
	wb, dir, ends := agentWorkbenchOn(t, fmt.Sprintf("[routes.test]\nkind = \"openai-chat\"\nbase_url = %q\nmodel = \"m\"\n", srv.URL))
	if _, err := wb.Input(t.Context(), "remember the number"); err != nil {
		t.Fatal(err)
	}
	if p := <-ends; p.End != agent.EndWaited {
		t.Fatalf("%+v", p)
	}
	wb.Close()
	wb2, ends2, stop := agentruntest.Start(t, dir)
	defer stop()
	if _, err := wb2.Input(t.Context(), "what was it?"); err != nil {
		t.Fatal(err)
	}
	if p := <-ends2; p.End != agent.EndWaited || p.Turn != 2 {
		t.Fatalf("%+v", p)
	}
	last := srv.Bodies()[2]
	for _, want := range []string{"remember the number", `x = 42`, "what was it?", `"role":"tool"`} {
		if !bytes.Contains(last, []byte(want)) {
			t.Errorf("the request after the restart lacks %s:\n%s", want, last)
		}
	}
}

// A fold at a real HTTP route's window: the usage the route reported makes the next
// request come within the margin, so one fold call summarizes, the head moves at the
// fold, and the next step's request carries the summary and not what it covers.
func TestAgentFoldsAtAnHTTPRoutesWindow(t *testing.T) {
	const summary = "Goal: wait.\nProgress: waited once.\nDecisions: none.\nNext steps: wait again.\nFiles: none."
	for _, c := range []struct {
		wire, usage string
	}{
		{routetest.OpenAIChat, `{"prompt_tokens":1900,"completion_tokens":10}`},
		{routetest.Anthropic, `{"input_tokens":1900,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":10}`},
	} {
		t.Run(c.wire, func(t *testing.T) {
			srv := routetest.New(t, c.wire,
				routetest.Step{Code: routetest.Code(`await runtime.wait(None)`), Usage: c.usage},
				routetest.Step{Text: summary},
				routetest.Step{Code: routetest.Code(`await runtime.wait(None)`)})
			wb, dir, ends := agentWorkbenchOn(t, fmt.Sprintf("[routes.test]\nkind = %q\nbase_url = %q\nmodel = \"m\"\ncontext_tokens = 2000\n", c.wire, srv.URL))
			for _, text := range []string{"first", "second"} {
				if _, err := wb.Input(t.Context(), text); err != nil {
					t.Fatal(err)
				}
				if p := <-ends; p.End != agent.EndWaited {
					t.Fatalf("after %q: %+v", text, p)
				}
			}
			st, err := store.OpenDir(t.Context(), dir, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			sess, err := st.SessionByName(t.Context(), "root")
			if err != nil {
				t.Fatal(err)
			}
			turns, err := agent.Journal{Store: st, Session: sess.ID}.Turns(t.Context())
			if err != nil || len(turns) != 2 {
				t.Fatalf("turns %+v, %v", turns, err)
			}
			var folds []agent.ModelCall
			for _, turn := range turns {
				for _, call := range turn.Calls {
					if call.Purpose == agent.PurposeFold {
						folds = append(folds, call)
					}
				}
			}
			if len(folds) != 1 || folds[0].Turn != 2 || folds[0].Error != "" || len(turns[1].Folds) != 1 {
				t.Fatalf("fold calls %+v, folds %+v", folds, turns[1].Folds)
			}
			fold := turns[1].Folds[0]
			tr, err := transcript.Load(t.Context(), st, sess.ID)
			if err != nil {
				t.Fatal(err)
			}
			var pins []*transcript.Pin
			for _, l := range tr.Links() {
				if l.Pin != nil {
					pins = append(pins, l.Pin)
				}
			}
			if fold.HeadReason != transcript.ReasonFold || fold.Summary != summary || len(pins) != 2 ||
				pins[1].Reason != transcript.ReasonFold || fold.HeaderAfter != pins[1].Digest {
				t.Fatalf("fold %+v, pins %+v", fold, pins)
			}
			bodies := srv.Bodies()
			if len(bodies) != 3 {
				t.Fatalf("%d requests", len(bodies))
			}
			// The fold's request is the step's plus the instruction, tools and all, so that
			// it shares the cached prefix.
			h0, c0, _ := routetest.Conversation(c.wire, bodies[0])
			h1, c1, _ := routetest.Conversation(c.wire, bodies[1])
			if !bytes.Contains(bodies[1], []byte(`"tools"`)) || !bytes.Equal(h0, h1) || !bytes.HasPrefix(c1, c0) || !folds[0].Extends {
				t.Errorf("the fold call does not extend the step's request:\n%s\n%s", bodies[0], bodies[1])
			}
			after := foldedRequest(t, c.wire, bodies[2])
			if after.summary != summary || !strings.Contains(after.first, "second") || strings.Contains(string(bodies[2]), "first") {
				t.Errorf("the request after the fold: %+v\n%s", after, bodies[2])
			}
		})
	}
}

// folded is what a request after a fold carries after its header: the text of the
// block that follows the header, and the first message of the conversation.
type folded struct{ summary, first string }

// foldedRequest reads a request body of the wire format as folded.

func foldedRequest(t *testing.T, wire string, body []byte) folded {
	t.Helper()
	var req struct {
		System []struct {
			Text string `json:"text"`
		} `json:"system"`
		Messages []struct {
			Role    string         `json:"role"`
			Content jsontext.Value `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	switch {
	case wire == routetest.Anthropic && len(req.System) == 2 && len(req.Messages) > 0:
		return folded{summary: req.System[1].Text, first: string(req.Messages[0].Content)}
	case wire == routetest.OpenAIChat && len(req.Messages) > 2 && req.Messages[1].Role == "system":
		var s string
		json.Unmarshal(req.Messages[1].Content, &s)
		return folded{summary: s, first: string(req.Messages[2].Content)}
	}
	t.Fatalf("the request after the fold has no summary after its header:\n%s", body)
	return folded{}
}

// An operator's fold or reset of an agent that has stopped is refused at once: no turn
// will run again for it to wait on.
func TestAStoppedAgentRefusesAFold(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := "[routes.test]\nkind = \"script\"\nscript = \"replies.jsonl\"\n\n[agent]\nroute = \"test\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "replies.jsonl"), []byte(`{"code":"await runtime.wait(None)"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf, err := agentrun.LoadConfig(filepath.Join(dir, "kiln.toml"), false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(t.Context(), session.Config{DataDir: dir, Workspace: filepath.Join(dir, "ws")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	a, err := agentrun.Start(ctx, s, agentrun.Options{Config: conf})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cancel()
	<-a.Done()
	// Without the refusal each call waits for its context: a minute is far past what a
	// refusal takes, and it ends the call if the refusal is missing.
	for name, do := range map[string]func(context.Context) (agent.Fold, error){"fold": a.Fold, "reset": a.Reset} {
		cctx, ccancel := context.WithTimeout(t.Context(), time.Minute)
		_, err := do(cctx)
		ccancel()
		if !errors.Is(err, agentrun.ErrStopped) {
			t.Errorf("%s of a stopped agent: %v, want ErrStopped", name, err)
		}
	}
}
