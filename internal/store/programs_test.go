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
		if err := st.EndProgram(t.Context(), p.ID, "ok", "", int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := st.EndProgram(t.Context(), p.ID, "ok", "", 0); !errors.Is(err, ErrNotFound) {
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
