package store

import (
	"context"
	"path/filepath"
	"testing"
)

// TestMigration20KeepsTheAgentsRecords: a record an older kiln left, with agent records
// whose ids have gaps (pruned), keeps them through migration 20 in order, each journal
// entry still reaching its record, and takes the new kinds and new rows after them.
func TestMigration20KeepsTheAgentsRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kiln.db")
	db := openAt(t, path, 19)
	for _, q := range []string{
		`INSERT INTO sessions (id, name, created_at_ms) VALUES (1, 's', 0)`,
		`INSERT INTO agent_records (id, session_id, kind, turn, body, at_ms) VALUES (3, 1, 'turn.start', 1, '{"turn":1}', 0)`,
		`INSERT INTO agent_records (id, session_id, kind, turn, body, at_ms) VALUES (7, 1, 'turn.end', 1, '{"turn":1,"end_reason":"waited"}', 0)`,
		`INSERT INTO journal (session_id, at_ms, kind, ref_id) VALUES (1, 0, 'turn.start', 3)`,
		`INSERT INTO journal (session_id, at_ms, kind, ref_id) VALUES (1, 0, 'turn.end', 7)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	st, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.AppendAgentRecord(ctx, 1, KindReview, 2, map[string]any{"cell": "c-1"}); err != nil {
		t.Fatal(err)
	}
	recs, err := st.AgentRecords(ctx, 1)
	if err != nil || len(recs) != 3 || recs[0].Kind != KindTurnStart || recs[1].Kind != KindTurnEnd || recs[2].Kind != KindReview {
		t.Fatalf("after migration 20: %+v %v", recs, err)
	}
	entries, err := st.Log(ctx, LogFilter{Session: 1})
	if err != nil || len(entries) != 3 {
		t.Fatalf("the journal: %d entries, %v", len(entries), err)
	}
	for i, e := range entries {
		if r, ok := e.Record.(AgentRecord); !ok || r.ID != recs[i].ID {
			t.Errorf("journal entry %d reaches %+v; want record %d", i, e.Record, recs[i].ID)
		}
	}
}
