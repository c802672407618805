package kiln_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/admin"
	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/journal"
)

// revisions are the header revisions of session in data's record, read once the
// workbench that wrote them is closed.
func revisions(t *testing.T, data, session string) []transcript.Revision {
	t.Helper()
	st, err := store.OpenDir(context.Background(), data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.SessionByName(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Load(context.Background(), st, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []transcript.Revision
	for _, l := range tr.Links() {
		if l.Revision != nil {
			out = append(out, *l.Revision)
		}
	}
	return out
}

func openIn(t *testing.T, data, workspace string) *kiln.Workbench {
	t.Helper()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: data, Workspace: workspace, SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return wb
}

// TestAChangeIsTheCellsThatRanAsItWasMade: AGENTS.md rewritten while a cell runs (by its
// Python, or by any writer: the host cannot tell them apart) is that cell's; rewritten
// between two cells, it is the host's, noticed before the next starts; a change made by
// a cell's workspace.run is that cell's, by the request; each with the file's path; no
// actor carries a step nobody knows.
func TestAChangeIsTheCellsThatRanAsItWasMade(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), t.TempDir()
	agents := filepath.Join(ws, "AGENTS.md")
	os.WriteFile(agents, []byte("one\n"), 0o600)
	fifo := filepath.Join(ws, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	wb := openIn(t, data, ws)
	done := make(chan error, 1)
	go func() {
		_, err := wb.Execute(context.Background(), "open('go').read()")
		done <- err
	}()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // opens once the cell opens go to read: it runs
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(agents, []byte("two\n"), 0o600) // while the cell runs: it ends only once go is written
	w.Write([]byte("x"))
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	os.WriteFile(agents, []byte("three\n"), 0o600) // between two cells
	value(t, wb, "1 + 1")
	value(t, wb, `r = await runtime.request("workspace.run", argv=["sh", "-c", "echo four >> AGENTS.md"])`)
	wb.Close()

	revs := revisions(t, data, "s")
	if len(revs) != 3 {
		t.Fatalf("%d revisions; want 3: %+v", len(revs), revs)
	}
	for i, want := range []transcript.Actor{
		{Origin: transcript.OriginSession, ExecutionID: "c-1", Path: agents, Reason: "found when execution c-1 ended, unchanged as it started"},
		{Origin: transcript.OriginHost, Path: agents, Reason: "noticed as a cell was about to start"},
		{Origin: transcript.OriginSession, ExecutionID: "c-3", Path: agents, Reason: "made by workspace.run request r-1 of execution c-3"},
	} {
		if revs[i].Actor != want {
			t.Errorf("revision %d: actor %+v; want %+v", i+1, revs[i].Actor, want)
		}
		data, _ := json.Marshal(revs[i].Actor)
		if strings.Contains(string(data), "step") {
			t.Errorf("revision %d: actor %s carries a step", i+1, data)
		}
	}
}

// TestABrokenHeaderLinkIsRestartedOnce: a stored revision whose patch was altered is
// followed, at the next open, by one revision carrying the whole current text; later
// opens append nothing, and runtime.instructions reaches the current text.
func TestABrokenHeaderLinkIsRestartedOnce(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), t.TempDir()
	agents := filepath.Join(ws, "AGENTS.md")
	os.WriteFile(agents, []byte("one\n"), 0o600)
	openIn(t, data, ws).Close()
	os.WriteFile(agents, []byte("two\n"), 0o600)
	openIn(t, data, ws).Close()
	if n := len(revisions(t, data, "s")); n != 1 {
		t.Fatalf("%d revisions", n)
	}
	// Alter one patch line of the stored revision.
	alterRevision(t, data, `"new_lines":["two`, `"new_lines":["EVIL`)
	for range 3 {
		openIn(t, data, ws).Close()
	}
	revs := revisions(t, data, "s")
	if len(revs) != 2 || revs[1].Change.Form != transcript.FormFull || !strings.Contains(revs[1].Actor.Reason, "whole again") {
		t.Fatalf("after three opens: %d revisions, the last %+v", len(revs), revs[len(revs)-1])
	}
	wb := openIn(t, data, ws)
	defer wb.Close()
	got := value(t, wb, `r = await runtime.request("runtime.instructions")
r["complete"], r["text"].endswith("two\n"), [b["seq"] > 0 for b in r["broken_links"]]`)
	if got != "(True, True, [True])" {
		t.Errorf("runtime.instructions: %s", got)
	}
}

// alterRevision rewrites from to to in the body of the stored revisions.
func alterRevision(t *testing.T, data, from, to string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE prompt_records SET body = replace(body, ?, ?) WHERE type = 'header_revision' AND instr(body, ?) > 0`, from, to, from)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("altered %d records", n)
	}
}

// TestTheRenderedTranscriptShowsNothingUnknown: a cell the host refused before it ran,
// for any of its reasons, is recorded as not run and has no running time, and a peer
// request without text shows "(no text)", never its payload's other members.
func TestTheRenderedTranscriptShowsNothingUnknown(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), t.TempDir()
	wb := openIn(t, data, ws)
	refusals := []struct{ code, why string }{
		{"#" + strings.Repeat("x", 262144), "over the limit of 262144"},
		{"x = '\xff'", "not valid UTF-8"},
		{"#" + strings.Repeat("\x01", 200000), "could not send the cell"}, // six bytes each, escaped: past 1 MiB
	}
	for _, r := range refusals {
		rec, err := wb.Execute(context.Background(), r.code)
		if err != nil || rec.Status != kiln.StatusError || !rec.NotRun || rec.Error == nil || !strings.Contains(*rec.Error, r.why) {
			t.Fatalf("a cell refused as %s: %v %+v", r.why, err, rec)
		}
	}
	value(t, wb, "1 + 1")
	wb.Close()
	st, err := store.OpenDir(context.Background(), data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.SessionByName(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendEvent(context.Background(), sess.ID, "peer",
		map[string]any{"peer_request": map[string]string{"id": "req-2", "session": "s-2"}, "secret": "S2"}); err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Load(context.Background(), st, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var tools, users []string
	for _, m := range tr.Render() {
		switch m.Role {
		case transcript.RoleTool:
			tools = append(tools, strings.SplitN(m.Content, "\n", 2)[0])
		case transcript.RoleUser:
			users = append(users, m.Content)
		}
	}
	if len(tools) != len(refusals)+1 || !strings.Contains(tools[len(refusals)], " · ran ") {
		t.Fatalf("the results' frames: %q; want %d, the last with a running time", tools, len(refusals)+1)
	}
	for i := range refusals {
		if strings.Contains(tools[i], "ran") {
			t.Errorf("refused cell %d is framed %q; want no running time", i+1, tools[i])
		}
		x, err := st.ExecutionByCell(context.Background(), sess.ID, fmt.Sprintf("c-%d", i+1))
		if err != nil || !x.NotRun {
			t.Errorf("refused cell %d is recorded %+v, %v; want not run", i+1, x, err)
		}
	}
	if n := len(users); n == 0 || strings.Contains(users[n-1], "S2") || !strings.HasSuffix(users[n-1], "· peer request req-2 from s-2]\n(no text)") {
		t.Errorf("the peer request renders %q", users)
	}
}

// TestAJournalRendersTheTranscriptAsTheHostDoes checks that a Journal's transcript of a
// workbench's session is the host's own rendering of its record, and that a model call
// recorded between two messages is shown between them, with its record.
func TestAJournalRendersTheTranscriptAsTheHostDoes(t *testing.T) {
	t.Parallel()
	data, ctx := t.TempDir(), context.Background()
	wb := openIn(t, data, t.TempDir())
	value(t, wb, "x = 1")
	if _, err := wb.Input(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	value(t, wb, "x + 1")
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenDir(ctx, data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.SessionByName(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Load(ctx, st, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var want []kiln.Message
	for _, m := range tr.Render() {
		want = append(want, kiln.Message{Seq: m.Seq, Role: m.Role, Content: m.Content})
	}
	j, err := journal.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	got, err := j.Transcript(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	roles := func(ms []kiln.Message) (out []string) {
		for _, m := range ms {
			out = append(out, m.Role)
		}
		return out
	}
	if !slices.EqualFunc(got, want, messageEqual) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if r := roles(got); !slices.Equal(r, []string{kiln.RoleSystem, kiln.RoleAssistant, kiln.RoleTool, kiln.RoleUser, kiln.RoleAssistant, kiln.RoleTool}) {
		t.Errorf("roles %v", r)
	}

	body := `{"turn":1,"seq":1,"purpose":"step","route":"main","latency_ms":40,"error":"route: 500"}`
	if _, err := st.AppendAgentRecord(ctx, sess.ID, store.KindModelCall, 1, jsontext.Value(body)); err != nil {
		t.Fatal(err)
	}
	wb = openIn(t, data, t.TempDir())
	value(t, wb, "3") // a cell after the call
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = j.Transcript(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(got, func(m kiln.Message) bool { return m.Role == kiln.RoleModel })
	if i < 0 || i+1 >= len(got) || got[i+1].Role != kiln.RoleAssistant || got[i+1].Content != "3" ||
		string(got[i].Call) != body || !strings.HasPrefix(got[i].Content, "[model call 1 of turn 1 · step · main · failed: route: 500 · 40ms") {
		t.Errorf("the model call: %+v", got)
	}
	again, err := j.WithModelCalls(ctx, "s", slices.Delete(slices.Clone(got), i, i+1))
	if err != nil || !slices.EqualFunc(again, got, messageEqual) {
		t.Errorf("with the calls placed again: %v\n%+v\nwant %+v", err, again, got)
	}
	if _, err := j.Transcript(ctx, "nobody"); !errors.Is(err, journal.ErrNoSession) {
		t.Errorf("a session the record lacks: %v", err)
	}
	for _, r := range [][2]string{{kiln.RoleSystem, transcript.RoleSystem}, {kiln.RoleUser, transcript.RoleUser},
		{kiln.RoleAssistant, transcript.RoleAssistant}, {kiln.RoleTool, transcript.RoleTool}} {
		if r[0] != r[1] {
			t.Errorf("role %q; the transcript's is %q", r[0], r[1])
		}
	}
}

// TestAJournalReadsATranscriptInOneReading checks that Journal.Transcript, which reads
// the record once, gives what rendering the record's transcript and then placing its
// model calls gives, on a session with every kind of message: cells, an operator
// input, the agent's own send, a peer request, changes of the instruction file (from
// outside and by the cell's own workspace.run) and a model call.
func TestAJournalReadsATranscriptInOneReading(t *testing.T) {
	t.Parallel()
	data, ws, ctx := t.TempDir(), t.TempDir(), context.Background()
	agents := filepath.Join(ws, "AGENTS.md")
	if err := os.WriteFile(agents, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wb := openIn(t, data, ws)
	value(t, wb, "x = 1")
	if err := os.WriteFile(agents, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	value(t, wb, `r = await runtime.request("local.send", text="hello, operator")`)
	if _, err := wb.Input(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	value(t, wb, `r = await runtime.request("workspace.run", argv=["sh", "-c", "echo three >> AGENTS.md"])`)
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenDir(ctx, data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := st.SessionByName(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendEvent(ctx, sess.ID, "peer",
		map[string]any{"peer_request": map[string]string{"id": "req-1", "session": "s-2"}, "text": "help"}); err != nil {
		t.Fatal(err)
	}
	body := `{"turn":1,"seq":1,"purpose":"step","route":"main","latency_ms":40}`
	if _, err := st.AppendAgentRecord(ctx, sess.ID, store.KindModelCall, 1, jsontext.Value(body)); err != nil {
		t.Fatal(err)
	}
	st.Close()
	wb = openIn(t, data, ws)
	value(t, wb, "6 * 7") // a cell after the model call
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}

	j, err := journal.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	got, err := j.Transcript(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	// The same record rendered in two readings: the transcript, then the calls.
	st, err = store.OpenDir(ctx, data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transcript.Load(ctx, st, sess.ID)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var rendered []kiln.Message
	for _, m := range tr.Render() {
		rendered = append(rendered, kiln.Message{Seq: m.Seq, Role: m.Role, Content: m.Content})
	}
	want, err := j.WithModelCalls(ctx, "s", rendered)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, want, messageEqual) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	var text strings.Builder
	roles := map[string]int{}
	for _, m := range got {
		roles[m.Role]++
		text.WriteString(m.Content + "\n")
	}
	for _, role := range []string{kiln.RoleSystem, kiln.RoleUser, kiln.RoleAssistant, kiln.RoleTool, kiln.RoleModel} {
		if roles[role] == 0 {
			t.Errorf("no message of role %s: %+v", role, got)
		}
	}
	for _, part := range []string{"local.send", "operator]\nhello", "peer request req-1 from s-2]\nhelp", "AGENTS.md", "[model call 1 of turn 1", "6 * 7"} {
		if !strings.Contains(text.String(), part) {
			t.Errorf("the transcript lacks %q:\n%s", part, text.String())
		}
	}
}

func messageEqual(a, b kiln.Message) bool {
	return a.Seq == b.Seq && a.Role == b.Role && a.Content == b.Content && string(a.Call) == string(b.Call)
}

// TestADaemonRendersTheTranscriptAsTheJournalDoes checks that the transcript of a session
// a daemon holds, as the daemon renders it, is the one a Journal open beside it renders
// from the record.
func TestADaemonRendersTheTranscriptAsTheJournalDoes(t *testing.T) {
	t.Parallel()
	data, ctx := t.TempDir(), context.Background()
	if _, err := admin.InitDataDir(ctx, data); err != nil {
		t.Fatal(err)
	}
	served(t, data, func(d *client.Daemon) {
		if _, err := d.OpenSession(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Send(ctx, "d", "hello"); err != nil {
			t.Fatal(err)
		}
		if rec, err := d.Execute(ctx, "d", "6 * 7", nil); err != nil || rec.Status != kiln.StatusOK {
			t.Fatalf("%+v, %v", rec, err)
		}
		held, err := d.Transcript(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		j, err := journal.Open(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		read, err := j.Transcript(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		if len(held) < 4 || !slices.EqualFunc(held, read, messageEqual) {
			t.Errorf("the daemon's:\n%+v\nthe journal's:\n%+v", held, read)
		}
		var p *client.DaemonError
		if _, err := d.Transcript(ctx, "nobody"); !errors.As(err, &p) || p.Code != "session_not_found" {
			t.Errorf("a session it does not hold: %v", err)
		}
	})
}
