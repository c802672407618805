package store

import (
	"errors"
	"testing"
)

func TestAgentRecords(t *testing.T) {
	st, err := Open(t.Context(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sess, err := st.CreateSession(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{KindTurnStart, KindModelCall, KindTurnEnd} {
		if _, err := st.AppendAgentRecord(t.Context(), sess.ID, kind, 1, map[string]any{"turn": 1, "kind": kind}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AppendAgentRecord(t.Context(), sess.ID, "turn.middle", 1, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an unknown kind: %v", err)
	}
	recs, err := st.AgentRecords(t.Context(), sess.ID)
	if err != nil || len(recs) != 3 || recs[2].Kind != KindTurnEnd || string(recs[1].Body) != `{"kind":"model_call","turn":1}` {
		t.Fatalf("got %+v, %v", recs, err)
	}
	log, err := st.Log(t.Context(), LogFilter{Session: sess.ID})
	if err != nil {
		t.Fatal(err)
	}
	last := log[len(log)-1]
	if rec, ok := last.Record.(AgentRecord); !ok || last.Kind != KindTurnEnd || rec.ID != recs[2].ID {
		t.Fatalf("the journal's last entry: %+v", last)
	}
}
