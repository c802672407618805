package store

// Kinds of the agent's records of a cell held for an operator's decision.
const (
	KindReview   = "execution.review"   // a cell was held before it ran, and why
	KindDecision = "execution.decision" // what became of a held cell: approved, rejected…
)

// migration20: the agent's records of cells held for a decision (execution.review) and
// of the decisions. A CHECK is widened by rebuilding the table; the rows are inserted
// anew, so that an engine whose ids come from a sequence (PostgreSQL's identity) goes on
// past them, and the journal's references follow them to their new ids.
const migration20 = `
CREATE TABLE agent_records_20 (
	id         {{.RowID}},
	session_id BIGINT NOT NULL REFERENCES sessions(id),
	kind       TEXT NOT NULL CHECK (kind IN ('turn.start', 'turn.end', 'model_call', 'fold', 'execution.review', 'execution.decision')),
	turn       BIGINT NOT NULL,
	body       TEXT NOT NULL, -- JSON: the record, as package agent defines it
	at_ms      BIGINT NOT NULL,
	old_id     BIGINT -- the row's id before this migration; null for rows after it
);
INSERT INTO agent_records_20 (session_id, kind, turn, body, at_ms, old_id)
	SELECT session_id, kind, turn, body, at_ms, id FROM agent_records ORDER BY id;
CREATE INDEX agent_records_20_old ON agent_records_20(old_id);
UPDATE journal SET ref_id = (SELECT n.id FROM agent_records_20 n WHERE n.old_id = journal.ref_id)
	WHERE kind IN ('turn.start', 'turn.end', 'model_call', 'fold');
DROP INDEX agent_records_20_old;
DROP TABLE agent_records;
ALTER TABLE agent_records_20 RENAME TO agent_records;
CREATE INDEX agent_records_by_session ON agent_records(session_id, turn);
`
