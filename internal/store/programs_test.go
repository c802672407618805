package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// TestProgramRuns: runs are numbered in their session, a source is kept up to
// MaxProgramCode bytes and cut at a character's start past it, with the digest and size
// of all of it, and a run ends once.
func TestProgramRuns(t *testing.T) {
	st, err := Open(t.Context(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.CreateSession(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	atLimit := strings.Repeat("x", MaxProgramCode)
	for i, c := range []struct{ code, kept string }{
		{atLimit, atLimit},
		{atLimit + "y", atLimit},
		{strings.Repeat("x", MaxProgramCode-1) + "é", strings.Repeat("x", MaxProgramCode-1)}, // é would end past it
	} {
		p, err := st.StartProgram(t.Context(), sess.ID, c.code)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.ProgramByID(t.Context(), sess.ID, p.ID)
		sum := sha256.Sum256([]byte(c.code))
		if err != nil || got.RunID != "p-"+string(rune('1'+i)) || got.Code != c.kept || got.CodeBytes != int64(len(c.code)) ||
			got.CodeSHA256 != hex.EncodeToString(sum[:]) || got.Status != nil || got.EndedAt != nil {
			t.Errorf("run %d: %.40v, %v", i+1, got, err)
		}
		if err := st.EndProgram(t.Context(), p.ID, ProgramEnd{Status: "ok", Refused: int64(i)}); err != nil {
			t.Fatal(err)
		}
		if err := st.EndProgram(t.Context(), p.ID, ProgramEnd{Status: "ok"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("run %d ended twice: %v", i+1, err)
		}
		if got, err := st.ProgramByID(t.Context(), sess.ID, p.ID); err != nil || got.Status == nil || *got.Status != "ok" ||
			got.EndedAt == nil || got.Error != nil || got.RefusedCalls != int64(i) {
			t.Errorf("run %d ended: %.40v, %v", i+1, got, err)
		}
	}
	log, err := st.Log(t.Context(), LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	if last := log[len(log)-1]; last.Kind != KindProgramEnd {
		t.Errorf("the last entry: %+v", last)
	}
	if _, err := st.ProgramByID(t.Context(), sess.ID+1, 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("another session's run: %v", err)
	}
}

// TestAnEndedProgramsUnansweredCallsAreAnswered: a run's end gives each of its calls
// still without a reply the end's reply, before the end in the journal; a call answered
// keeps its reply, and another run's call is left alone.
func TestAnEndedProgramsUnansweredCallsAreAnswered(t *testing.T) {
	st, err := Open(t.Context(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.CreateSession(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	p1, err := st.StartProgram(t.Context(), sess.ID, "1")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := st.StartProgram(t.Context(), sess.ID, "2")
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	err = st.Update(t.Context(), func(tx *Tx) error {
		for i, run := range []string{p1.RunID, p1.RunID, p2.RunID} {
			req := Request{SessionID: sess.ID, ExecutionID: run, RequestID: "r-" + string(rune('1'+i)), Method: "tools.call", Body: []byte("{}")}
			if err := tx.InsertRequest(&req); err != nil {
				return err
			}
			reqs = append(reqs, req)
		}
		return tx.InsertReply(sess.ID, reqs[0].ID, Reply{Kind: "ok", Value: []byte(`"done"`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EndProgram(t.Context(), p1.ID, ProgramEnd{Status: "ok",
		Unanswered: Reply{Kind: "error", Code: "execution_ended", Message: "too late"}}); err != nil {
		t.Fatal(err)
	}
	log, err := st.Log(t.Context(), LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range log {
		got = append(got, e.Kind)
	}
	want := []string{KindSession, KindProgram, KindProgram, KindRequest, KindRequest, KindRequest, KindReply, KindReply, KindProgramEnd}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the journal: %v; want %v", got, want)
	}
	for i, w := range []string{`ok "done"`, "error execution_ended too late", "none"} {
		_, r, err := st.RequestByID(t.Context(), sess.ID, reqs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		s := "none"
		if r != nil {
			s = strings.TrimSpace(r.Kind + " " + r.Code + " " + r.Message + " " + string(r.Value))
			s = strings.Join(strings.Fields(s), " ")
		}
		if s != w {
			t.Errorf("call %d's reply: %q; want %q", i+1, s, w)
		}
	}
}

// TestAbandonedProgramRunsAreEnded: the runs of a session still running whose owner is
// dead (its pid now another process's, or its start unknown and its pid gone) are
// recorded failed with HostEndedRunMessage, their calls without a reply answered; a run
// this process owns, one owned on another machine, and another session's run are left
// running.
func TestAbandonedProgramRunsAreEnded(t *testing.T) {
	st, err := Open(t.Context(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := st.CreateSession(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.CreateSession(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	var runs []ProgramRun
	for _, sess := range []int64{a.ID, a.ID, a.ID, a.ID, b.ID} {
		p, err := st.StartProgram(t.Context(), sess, "")
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, p)
	}
	var call Request
	err = st.Update(t.Context(), func(tx *Tx) error {
		for _, o := range []struct {
			run          int64
			start, where string
		}{
			{runs[0].ID, "another process's start", ""},
			{runs[1].ID, "", ""},
			{runs[3].ID, "", "another machine"},
			{runs[4].ID, "another process's start", ""},
		} {
			q := `UPDATE program_runs SET owner_start = ? WHERE id = ?`
			args := []any{o.start, o.run}
			if o.start == "" {
				q = `UPDATE program_runs SET owner_start = '', owner_pid = ?, owner_hostname = owner_hostname || ? WHERE id = ?`
				args = []any{1 << 30, o.where, o.run} // no such pid
			}
			if _, err := tx.exec(q, args...); err != nil {
				return err
			}
		}
		call = Request{SessionID: a.ID, ExecutionID: runs[0].RunID, RequestID: "r-1", Method: "tools.call", Body: []byte("{}")}
		return tx.InsertRequest(&call)
	})
	if err != nil {
		t.Fatal(err)
	}
	unanswered := func(runID string) Reply {
		return Reply{Kind: "error", Code: "execution_ended", Message: runID + " ended"}
	}
	ended, err := st.EndAbandonedPrograms(t.Context(), a.ID, unanswered)
	if err != nil || strings.Join(ended, " ") != "p-1 p-2" {
		t.Fatalf("ended %v, %v; want p-1 p-2", ended, err)
	}
	for i, r := range runs {
		got, err := st.ProgramByID(t.Context(), r.SessionID, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if got.Status == nil || *got.Status != StatusFailed || got.Error == nil || *got.Error != HostEndedRunMessage || got.EndedAt == nil {
				t.Errorf("run %d: %+v; want it failed", i+1, got)
			}
		} else if got.Status != nil {
			t.Errorf("run %d: %+v; want it running", i+1, got)
		}
	}
	if _, r, err := st.RequestByID(t.Context(), a.ID, call.ID); err != nil || r == nil || r.Code != "execution_ended" || r.Message != "p-1 ended" {
		t.Errorf("the abandoned run's call: %+v, %v", r, err)
	}
	if ended, err := st.EndAbandonedPrograms(t.Context(), a.ID, unanswered); err != nil || len(ended) != 0 {
		t.Errorf("again: %v, %v; want none", ended, err)
	}
}
