package store

import (
	"context"
	"fmt"
	"strings"
)

// rowIDSlot is the one slot of the migrations, replaced by the engine's row id type.
const rowIDSlot = "{{.RowID}}"

// migrations are the schema's versions, in order, as d writes them: migrations(d)[i]
// takes a database from version i to version i+1. Each runs in its own transaction with
// the version it reaches, so a database is always at exactly one version. Append; never
// change what a released one makes.
//
// They are one description for every engine: written in types every engine's SQL takes
// (BIGINT, DOUBLE PRECISION, TEXT; SQLite gives BIGINT the affinity of INTEGER), with
// one slot, {{.RowID}}, for what each engine's SQL says differently: a row id, the key a
// row gets when it is inserted without one. Versions up to 21 said INTEGER and REAL, of
// the same affinities, in a SQLite database made then.
func migrations(d *Dialect) []string {
	steps := []string{migration1, migration2, migration3, migration4, migration5, migration6, migration7, migration8, migration9, migration10, migration11, migration12, migration13, migration14, migration15, migration16, migration17, migration18, migration19, migration20, migration21}
	// Not text/template: its lookup of methods by name keeps every exported method of
	// the program in the executable, which then grows by two thirds.
	for i, step := range steps {
		steps[i] = strings.ReplaceAll(step, rowIDSlot, d.RowID)
	}
	return steps
}

// migration1: sessions, the journal, and the records.
const migration1 = `
CREATE TABLE sessions (
	id            {{.RowID}},
	name          TEXT NOT NULL UNIQUE,
	created_at_ms BIGINT NOT NULL,
	generations   BIGINT NOT NULL DEFAULT 0, -- generations started, for the next g-N
	cells         BIGINT NOT NULL DEFAULT 0, -- executions started, for the next c-N
	delivered_event_id BIGINT NOT NULL DEFAULT 0 -- inputs up to here were handed to the agent
);
CREATE TABLE journal (
	seq        {{.RowID}},
	session_id BIGINT NOT NULL REFERENCES sessions(id),
	at_ms      BIGINT NOT NULL,
	kind       TEXT NOT NULL,
	ref_id     BIGINT NOT NULL
);
CREATE INDEX journal_by_session ON journal(session_id, seq);
CREATE TABLE kernel_resets (
	id            {{.RowID}},
	session_id    BIGINT NOT NULL REFERENCES sessions(id),
	generation    TEXT NOT NULL,
	started_at_ms BIGINT NOT NULL,
	status        TEXT NOT NULL CHECK (status IN ('started', 'failed')),
	loaded        TEXT NOT NULL, -- JSON: what the generation loaded
	error         TEXT,
	UNIQUE (session_id, generation)
);
CREATE TABLE executions (
	id              {{.RowID}},
	session_id      BIGINT NOT NULL REFERENCES sessions(id),
	generation      TEXT NOT NULL,
	cell_id         TEXT NOT NULL,
	code_sha256     TEXT NOT NULL,
	code            TEXT NOT NULL,
	status          TEXT NOT NULL, -- running until it ends
	reported_status TEXT,          -- the worker's own status, where the host's record differs
	started_at_ms   BIGINT NOT NULL,
	ended_at_ms     BIGINT,
	output          TEXT,          -- JSON array of {stream, text}
	truncated_bytes BIGINT NOT NULL DEFAULT 0,
	error           TEXT,
	namespace_lost  BIGINT NOT NULL DEFAULT 0,
	UNIQUE (session_id, cell_id)
);
CREATE TABLE events (
	id             {{.RowID}},
	session_id     BIGINT NOT NULL REFERENCES sessions(id),
	source         TEXT NOT NULL,
	received_at_ms BIGINT NOT NULL,
	payload        TEXT NOT NULL -- JSON, exactly what arrived
);
CREATE INDEX events_by_session ON events(session_id, id);
CREATE TABLE host_requests (
	id             {{.RowID}},
	session_id     BIGINT NOT NULL REFERENCES sessions(id),
	generation     TEXT NOT NULL,
	execution_id   TEXT NOT NULL,
	request_id     TEXT NOT NULL,
	method         TEXT NOT NULL,
	request        TEXT NOT NULL, -- JSON, the whole request object
	received_at_ms BIGINT NOT NULL
);
CREATE INDEX host_requests_by_execution ON host_requests(session_id, execution_id);
CREATE TABLE host_replies (
	request_id    {{.RowID}} REFERENCES host_requests(id),
	kind          TEXT NOT NULL CHECK (kind IN ('ok', 'error')),
	value         TEXT,  -- JSON, for ok
	code          TEXT,  -- for error
	message       TEXT,  -- for error
	replied_at_ms BIGINT NOT NULL
);
CREATE TABLE effects (
	id            {{.RowID}},
	request_id    BIGINT NOT NULL UNIQUE REFERENCES host_requests(id),
	kind          TEXT NOT NULL,
	detail        TEXT NOT NULL, -- JSON: what is being done
	started_at_ms BIGINT NOT NULL,
	receipt       TEXT,          -- JSON: what came of it; null until it is known
	ended_at_ms   BIGINT
);
CREATE TABLE waits (
	id            {{.RowID}},
	request_id    BIGINT NOT NULL UNIQUE REFERENCES host_requests(id),
	session_id    BIGINT NOT NULL REFERENCES sessions(id),
	execution_id  TEXT NOT NULL,
	seconds       DOUBLE PRECISION,
	reason        TEXT NOT NULL,
	created_at_ms BIGINT NOT NULL,
	deadline_ms   BIGINT,
	state         TEXT NOT NULL CHECK (state IN ('waiting', 'input_pending', 'woken', 'superseded')),
	event_id      BIGINT REFERENCES events(id), -- the input that ended it, if one did
	ended_at_ms   BIGINT
);
CREATE INDEX waits_open ON waits(session_id, state);
`

// migration2: the transcript's header records, pins and revisions.
const migration2 = `
CREATE TABLE prompt_records (
	id         {{.RowID}},
	session_id BIGINT NOT NULL REFERENCES sessions(id),
	type       TEXT NOT NULL CHECK (type IN ('header_pin', 'header_revision')),
	digest     TEXT NOT NULL, -- of the instruction text the record reaches
	body       TEXT NOT NULL, -- JSON: the record, as the transcript defines it
	at_ms      BIGINT NOT NULL
);
`

// migration3: the active behavior policy, and each input's attention decision.
const migration3 = `
CREATE TABLE behavior (
	id              {{.RowID}} CHECK (id = 1),
	epoch           BIGINT NOT NULL,
	release_id      TEXT,             -- null: the built-in defaults
	activated_at_ms BIGINT NOT NULL
);
INSERT INTO behavior (id, epoch, release_id, activated_at_ms) VALUES (1, 0, NULL, 0);
ALTER TABLE events ADD COLUMN attention TEXT; -- JSON: the attention.plan decision
`

// migration4: how much of each backlog file has been folded into the database.
const migration4 = `
CREATE TABLE backlog_folded (
	file   TEXT PRIMARY KEY, -- the backlog file's name
	"offset" BIGINT NOT NULL  -- its bytes folded, from the start
);
`

// migration5: leases, such as a session's one host.
const migration5 = `
CREATE TABLE leases (
	key            TEXT PRIMARY KEY, -- what is held, such as session:<name>
	token          TEXT NOT NULL,    -- the holding Lease's own, so that only it releases
	pid            BIGINT NOT NULL,
	start          TEXT NOT NULL,    -- the holder's boot id and start time, or ''
	hostname       TEXT NOT NULL,
	acquired_at_ms BIGINT NOT NULL
);
`

// migration6: what a cell raised, in parts, and its raw output tails.
const migration6 = `
ALTER TABLE executions ADD COLUMN exception TEXT; -- JSON: {"type","value","traceback"}
ALTER TABLE executions ADD COLUMN raw TEXT;       -- JSON: {"stdout","stderr"}, each a tail or absent
`

// migration7: the agent's records: turns, model calls, folds.
const migration7 = `
CREATE TABLE agent_records (
	id         {{.RowID}},
	session_id BIGINT NOT NULL REFERENCES sessions(id),
	kind       TEXT NOT NULL CHECK (kind IN ('turn.start', 'turn.end', 'model_call', 'fold')),
	turn       BIGINT NOT NULL,
	body       TEXT NOT NULL, -- JSON: the record, as package agent defines it
	at_ms      BIGINT NOT NULL
);
CREATE INDEX agent_records_by_session ON agent_records(session_id, turn);
`

// migration8: epoch 0's release is kiln's initial release by its identity, not null, and
// every epoch names its release. The digest is the initial release's as
// internal/policy/testdata/behavior.json fixes it; it stays as written here even if a later
// kiln ships another initial release, which a migration of its own then records.
const migration8 = `
CREATE TABLE behavior_named (
	id              {{.RowID}} CHECK (id = 1),
	epoch           BIGINT NOT NULL,
	release_id      TEXT NOT NULL, -- the active release's identity; epoch 0's is kiln's initial release
	activated_at_ms BIGINT NOT NULL
);
INSERT INTO behavior_named (id, epoch, release_id, activated_at_ms)
	SELECT id, epoch, COALESCE(release_id, 'b69c207ca9467c752881ff84641cade53013a27d8c142cf3a0374551867a4247'), activated_at_ms
	FROM behavior;
DROP TABLE behavior;
ALTER TABLE behavior_named RENAME TO behavior;
`

// migration9: whether a cell ran at all, as the host recorded it. Cells an older kiln
// refused before they ran are marked from what it left: a source over the 262,144-byte
// limit, or the refusal's own words.
const migration9 = `
ALTER TABLE executions ADD COLUMN not_run BIGINT NOT NULL DEFAULT 0; -- 1: refused or never handed to a worker
UPDATE executions SET not_run = 1 WHERE ended_at_ms IS NOT NULL
	AND (octet_length(code) > 262144 OR error LIKE '%; it was not run');
`

// migration10: when and why each generation ended, recorded as the host sees it end.
const migration10 = `
ALTER TABLE kernel_resets ADD COLUMN ended_at_ms BIGINT;
ALTER TABLE kernel_resets ADD COLUMN end_cause TEXT; -- why it ended: exit status or signal, stderr tail
`

// migration11: a running cell's output, chunk by chunk, as it streamed.
const migration11 = `
CREATE TABLE output_chunks (
	id           {{.RowID}},
	session_id   BIGINT NOT NULL REFERENCES sessions(id),
	execution_id BIGINT NOT NULL REFERENCES executions(id),
	idx          BIGINT NOT NULL, -- 0 for the cell's first chunk
	stream       TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
	text         TEXT NOT NULL,
	total_bytes  BIGINT NOT NULL, -- the cell's chunks' bytes up to and with this one
	at_ms        BIGINT NOT NULL,
	UNIQUE (execution_id, idx)
);
`

// migration12: the limit that ended a cell, when one did.
const migration12 = `
ALTER TABLE executions ADD COLUMN limit_hit TEXT; -- memory, cpu_seconds or timeout
`

// migration13: program runs recorded in a session, each with its number and the process
// that runs it.
const migration13 = `
ALTER TABLE sessions ADD COLUMN programs BIGINT NOT NULL DEFAULT 0; -- program runs recorded, for the next p-N
CREATE TABLE program_runs (
	id             {{.RowID}},
	session_id     BIGINT NOT NULL REFERENCES sessions(id),
	run_id         TEXT NOT NULL,    -- p-1, p-2, … in its session
	code_sha256    TEXT NOT NULL,    -- of the whole source
	code           TEXT NOT NULL,    -- the source, cut at MaxProgramCode bytes
	code_bytes     BIGINT NOT NULL, -- the whole source's
	started_at_ms  BIGINT NOT NULL,
	ended_at_ms    BIGINT,
	status         TEXT,             -- how it ended; null while it runs
	error          TEXT,
	refused_calls  BIGINT NOT NULL DEFAULT 0, -- tool calls refused past the cap, not recorded
	owner_pid      BIGINT NOT NULL, -- the process that runs it, as a lease's holder
	owner_start    TEXT NOT NULL,    -- "<boot id>/<start time>"; '' where /proc does not say
	owner_hostname TEXT NOT NULL,
	UNIQUE (session_id, run_id)
);
`

// migration14: the size of a cell's whole source, as its record keeps at most
// wire.MaxCodeBytes of it. Rows from before it keep their whole source: null there is
// the code's own size.
const migration14 = `
ALTER TABLE executions ADD COLUMN code_bytes BIGINT; -- the whole source's size; null: the code's
`

// migration15: the policy that made each input's attention decision: the behavior epoch
// and the identity of the release it named. Decisions recorded before it name none.
const migration15 = `
ALTER TABLE events ADD COLUMN attention_epoch BIGINT; -- null: no decision, or one from before schema 15
ALTER TABLE events ADD COLUMN attention_release TEXT;
`

// migration21: leases that expire unless renewed, for a record several hosts share,
// with where their holder answers; and the daemon's sessions, as the record holds
// them for every daemon on it.
const migration21 = `
ALTER TABLE leases ADD COLUMN expires_at_ms BIGINT NOT NULL DEFAULT 0; -- 0: held while its process lives
ALTER TABLE leases ADD COLUMN url TEXT NOT NULL DEFAULT '';   -- where the holder answers, or ''
ALTER TABLE leases ADD COLUMN owner TEXT NOT NULL DEFAULT ''; -- the holding Store, which renews it
CREATE INDEX leases_by_owner ON leases(owner);
CREATE TABLE daemon_sessions (
	name  TEXT PRIMARY KEY,
	state TEXT NOT NULL -- JSON: how the session was opened, and whether it is open
);
`

// SchemaVersion is the version this kiln writes: the number of migrations.
const SchemaVersion = 21

// Version reports the database's schema version.
func (s *Store) Version(ctx context.Context) (int, error) { return s.eng.Version(ctx) }

// MigratedFrom is the schema's version as the Store opened, before it migrated the
// database to SchemaVersion; SchemaVersion when there was nothing to migrate.
func (s *Store) MigratedFrom() int { return s.migratedFrom }

// checkVersion refuses a database of another schema version than this kiln's, for a
// Store that reads it as it is.
func (s *Store) checkVersion(ctx context.Context) error {
	name := displayPath(s.eng.Path())
	v, err := s.Version(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("store: %s: %w", name, err)
	case v > SchemaVersion:
		return fmt.Errorf("%w: %s has version %d, this kiln knows %d", ErrSchemaTooNew, name, v, SchemaVersion)
	case v < SchemaVersion:
		return fmt.Errorf("store: %s has schema version %d, this kiln reads %d: a command that writes (kiln store migrate) migrates it", name, v, SchemaVersion)
	}
	return nil
}
