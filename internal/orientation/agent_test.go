package orientation_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/agentrun/agentruntest"
	"github.com/kilnrt/kiln/internal/route/routetest"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
)

// agentOn opens a workbench of a fresh data directory whose agent runs on the HTTP
// route at url; ends receives each turn's end.
func agentOn(t *testing.T, url string) (*session.Session, string, chan agentrun.Progress) {
	t.Helper()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("[routes.test]\nkind = \"openai-chat\"\nbase_url = %q\nmodel = \"m\"\n\n[agent]\nroute = \"test\"\n", url)
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	wb, ends, stop := agentruntest.Start(t, dir)
	t.Cleanup(stop)
	return wb, dir, ends
}

// chat is what a test reads of an OpenAI chat request: its messages.
type chat struct {
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func decodeChat(t *testing.T, body []byte) chat {
	t.Helper()
	var c chat
	if err := json.Unmarshal(body, &c, json.RejectUnknownMembers(false)); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return c
}

// An adoption a cell makes is observed where it was made, attributed to that cell, and
// the head keeps its bytes (rule 2); after frontier.select, the fold at the end of the
// turn moves the head to the text with the adoption in it (rule 3).
func TestAnAdoptionIsObservedThenFoldedIntoTheHead(t *testing.T) {
	const oriented = "Answer in one line."
	srv := routetest.New(t, routetest.OpenAIChat,
		routetest.Step{Code: routetest.Code(`await runtime.request("orientation.stage", candidate_id="c", text="` + oriented + `\n",
    target="orientation", scope={"kind": "global"})
print((await runtime.request("orientation.adopt", candidate_id="c", operation_id="op-1"))["adoption"])`)},
		routetest.Step{Code: routetest.Code(`a = await runtime.request("frontier.select")
b = await runtime.request("frontier.select")
print(a == b, a["scheduled"], a["covers_through"].startswith("request:"))`)},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None)`)},
		routetest.Step{Text: "Goal: orient.\nProgress: adopted.\nDecisions: one line.\nNext steps: wait.\nFiles: none."},
		routetest.Step{Code: routetest.Code(`await runtime.wait(None)`)})
	wb, dir, ends := agentOn(t, srv.URL)
	for _, text := range []string{"orient yourself", "again"} {
		if _, err := wb.Input(t.Context(), text); err != nil {
			t.Fatal(err)
		}
		if p := <-ends; p.End != agent.EndWaited {
			t.Fatalf("after %q: %+v", text, p)
		}
	}
	bodies := srv.Bodies()
	if len(bodies) != 5 {
		t.Fatalf("%d requests; want 5", len(bodies))
	}
	first, second, afterFold := decodeChat(t, bodies[0]), decodeChat(t, bodies[1]), decodeChat(t, bodies[4])
	if first.Messages[0].Role != "system" || second.Messages[0].Content != first.Messages[0].Content ||
		strings.Contains(second.Messages[0].Content, oriented) {
		t.Fatalf("the head moved before a fold:\n%s", second.Messages[0].Content)
	}
	var notice string
	for _, m := range second.Messages[len(first.Messages):] {
		if strings.Contains(m.Content, "instructions changed for this runtime") {
			notice = m.Content
		}
	}
	if !strings.Contains(notice, "changed by execution c-1") || !strings.Contains(notice, "+"+oriented) {
		t.Errorf("the observation the second request carries:\n%s", notice)
	}
	if !strings.Contains(string(bodies[2]), `True True True`) {
		t.Errorf("frontier.select twice in a turn answered otherwise:\n%s", bodies[2])
	}
	if !strings.Contains(afterFold.Messages[0].Content, oriented) {
		t.Errorf("the head after the fold lacks the adopted text:\n%s", afterFold.Messages[0].Content)
	}
	wb.Close()

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
	if err != nil || len(turns) != 2 || len(turns[0].Folds) != 1 || !turns[0].Folds[0].Selected ||
		turns[0].Folds[0].HeadReason != transcript.ReasonFoldCoveredRevision {
		t.Fatalf("turns %+v, %v; want a selected fold ending the first", turns, err)
	}
	if _, pending, err := st.PendingFrontier(t.Context(), sess.ID); pending || err != nil {
		t.Errorf("a frontier still pending after the fold: %v", err)
	}
	// The chain replays to the text the head was moved to, every link reconstructing.
	tr, err := transcript.Load(t.Context(), st, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	res := transcript.Resolve(tr.Links())
	if !res.Complete || len(res.Broken) > 0 || res.Head == nil || !strings.Contains(res.Head.Text, oriented) ||
		res.Head.Digest != turns[0].Folds[0].HeaderAfter {
		t.Errorf("the chain replays to %+v", res)
	}
}
