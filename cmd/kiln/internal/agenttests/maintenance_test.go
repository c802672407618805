package agenttests

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/journal"
)

const oriented = "Answer in one line."

// An agent on a script route, in a daemon, originates a work item with evidence, stages
// and adopts an orientation, assesses the item changed and selects a frontier: the
// record links the item to the adoption, the fold at the end of the turn moves the head
// to the adopted text, and another session of the data directory sees the change as the
// host's.
func TestSelfMaintenanceThroughADaemon(t *testing.T) {
	t.Parallel()
	dir := clitest.AgentDir(t,
		clitest.CodeReply(`item = await runtime.request("maintenance.originate", purpose="answer in one line",
    reason="the operator asked for brevity", evidence_refs=["execution:c-1"])
await runtime.request("orientation.stage", candidate_id="brief", text="`+oriented+`\n", target="orientation",
    scope={"kind": "global"})
await runtime.request("orientation.adopt", candidate_id="brief", operation_id="op-1")
done = await runtime.request("maintenance.assess", work_item_id=item["work_item_id"], outcome="changed")
print(done["assessment"]["changes"]["orientation_adoptions"][0]["ref"])`),
		clitest.CodeReply(`print(await runtime.request("frontier.select"))`),
		clitest.CodeReply(`await runtime.wait(None, reason="done")`),
		`{"text":"Goal: brevity.\nProgress: adopted an orientation.\nDecisions: one line.\nNext steps: wait.\nFiles: none."}`)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"t"}`, 201, nil)
	s.Call("POST", "/v1/sessions/t/executions", `{"code":"1"}`, 200, nil)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/inputs", `{"text":"be brief from now on"}`, 201, nil)
	clitest.Follow(t, dir, "s", 0, "turn.end")

	// Each change is an event of the session's stream, with its record, before the turn's
	// end.
	var changes []string
	d, err := client.DialDaemon(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Events(t.Context(), "s", 0, false, func(e client.Event) error {
		switch journal.EntryKind(e.Kind) {
		case journal.EntryWorkItem, journal.EntryWorkItemAssessed, journal.EntryCandidate, journal.EntryAdoption,
			journal.EntryFrontier, journal.EntryFrontierInstalled:
			changes = append(changes, e.Kind)
			if e.Kind == string(journal.EntryAdoption) && !strings.Contains(string(e.Raw), `"operation_id":"op-1"`) {
				t.Errorf("the adoption's event: %s", e.Raw)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(changes, " "),
		"work_item orientation.candidate orientation.adoption work_item.assessed frontier frontier.installed"; got != want {
		t.Errorf("the session's events of self-maintenance: %s; want %s", got, want)
	}

	items := clitest.KilnJSON[journal.WorkItem](t, "maintenance", "show", "w-1", "--data", dir, "--json")
	it := items[0]
	if it.State != "closed" || it.Assessment == nil || it.Assessment.Outcome != "changed" || it.Origin.Session != "s" ||
		len(it.EvidenceRefs) != 1 || len(it.Assessment.Changes.Adoptions) != 1 ||
		!strings.Contains(string(it.Assessment.Changes.Adoptions[0].Request), `"op-1"`) {
		t.Fatalf("the work item: %+v", it)
	}
	history := clitest.KilnJSON[journal.Adoption](t, "orientation", "history", "--data", dir, "--json")
	if len(history) != 1 || history[0].CandidateID != "brief" || history[0].By.Session != "s" ||
		it.Assessment.Changes.Adoptions[0].Ref != "request:"+strconv.Itoa(int(history[0].By.RequestID)) {
		t.Fatalf("history %+v; the item links %s", history, it.Assessment.Changes.Adoptions[0].Ref)
	}
	var listed struct {
		Items []journal.WorkItem `json:"items"`
	}
	s.Call("GET", "/v1/maintenance?state=closed", "", 200, &listed)
	if len(listed.Items) != 1 || listed.Items[0].WorkItemID != "w-1" {
		t.Errorf("GET /v1/maintenance: %+v", listed)
	}
	var orientation struct {
		Current []journal.Adoption `json:"current"`
		History []journal.Adoption `json:"history"`
	}
	s.Call("GET", "/v1/orientation", "", 200, &orientation)
	if len(orientation.Current) != 1 || orientation.Current[0].Text != oriented+"\n" || len(orientation.History) != 1 {
		t.Errorf("GET /v1/orientation: %+v", orientation)
	}

	// The fold the frontier selection asked for ended the turn and moved the head.
	turns := clitest.KilnJSON[journal.Turn](t, "turns", "s", "--data", dir, "--json")
	if len(turns) != 1 || len(turns[0].Folds) != 1 || !turns[0].Folds[0].Selected || turns[0].Folds[0].HeadReason != "fold_covered_revision" {
		t.Fatalf("turns %+v", turns)
	}
	var pin string
	for _, e := range clitest.KilnJSON[journal.LogEntry](t, "log", "--session", "s", "--data", dir, "--json") {
		if p, ok := e.Record.(map[string]any); ok && e.Kind == journal.EntryPromptHeader {
			if body, ok := p["body"].(map[string]any); ok {
				pin, _ = body["text"].(string)
			}
		}
	}
	if !strings.HasSuffix(pin, "\n"+oriented+"\n") {
		t.Errorf("the newest pin of s:\n%s", pin)
	}

	// Session t notices the change at its next cell, as the host's; its chain replays.
	var rec clitest.ExecRecord
	s.Call("POST", "/v1/sessions/t/executions", `{"code":"2"}`, 200, nil)
	s.Call("POST", "/v1/sessions/t/executions", `{"code":"r = await runtime.request(\"runtime.instructions\")\n`+
		`i = await runtime.inspect()\n`+
		`print(r[\"complete\"], \"broken_links\" in r, r[\"text\"].endswith(\"`+oriented+`\\n\"), i[\"open_work_items\"], i[\"orientation_digest\"] == `+
		`(await runtime.request(\"orientation.current\", scope={\"kind\": \"global\"}))[\"digest\"])"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "True False True 0 True\n" {
		t.Errorf("t's instructions and inspection: %+v", rec)
	}
	var revision string
	for _, e := range clitest.KilnJSON[journal.LogEntry](t, "log", "--session", "t", "--data", dir, "--json") {
		if e.Kind == journal.EntryPromptRevision {
			data, _ := json.Marshal(e.Record)
			if strings.Contains(string(data), "brief") {
				revision = string(data)
			}
		}
	}
	if !strings.Contains(revision, `"origin":"host"`) || !strings.Contains(revision, "adopted for every session by session s, execution c-1") {
		t.Errorf("t's observation of the adoption: %s", revision)
	}
}

// An adoption whose daemon is killed with SIGKILL after it committed, and retried with
// its operation id by a new daemon, is the one adoption.
func TestAdoptionRetriedAfterKill(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"s"}`, 201, nil)
	s.Call("POST", "/v1/sessions/s/executions", `{"code":"await runtime.request(\"orientation.stage\", candidate_id=\"c\", `+
		`text=\"be kind\", scope={\"kind\": \"session\"})"}`, 200, nil)
	s.Call("POST", "/v1/sessions/s/executions", `{"code":"a = await runtime.request(\"orientation.adopt\", candidate_id=\"c\", `+
		`operation_id=\"op-1\")\nimport time\ntime.sleep(100)","wait_ms":0}`, 202, nil)
	clitest.FollowUntil(t, dir, "s", 0, func(e client.Event) bool {
		return e.Kind == "reply" && strings.Contains(string(e.Raw), `"orientation.adopt"`)
	})
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Exited

	s2 := clitest.StartServe(t, dir)
	var rec clitest.ExecRecord
	s2.Call("POST", "/v1/sessions/s/executions", `{"code":"a = await runtime.request(\"orientation.adopt\", candidate_id=\"c\", `+
		`operation_id=\"op-1\")\nprint(a[\"adoption\"], a[\"operation_id\"])"}`, 200, &rec)
	if len(rec.Output) != 1 || rec.Output[0].Text != "1 op-1\n" {
		t.Fatalf("the retry: %+v", rec)
	}
	if history := clitest.KilnJSON[journal.Adoption](t, "orientation", "history", "--data", dir, "--json"); len(history) != 1 {
		t.Errorf("%d adoptions; want 1: %+v", len(history), history)
	}
}
