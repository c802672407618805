package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// This file holds the record of self-maintenance: work items an agent opens about
// itself and assesses, the orientation texts it stages and adopts, and the frontiers it
// selects. Work items and orientation are per data directory, visible to every session;
// each row names the session and execution that wrote it.

// Errors of self-maintenance a caller tells apart with errors.Is.
var (
	// ErrOverLimit is a record refused because its bound is reached.
	ErrOverLimit = errors.New("store: over the limit")
	// ErrClosedItem is an assessment of a work item already assessed.
	ErrClosedItem = errors.New("store: work item closed")
	// ErrConflict is an adoption whose candidate's base is no longer the current
	// adoption of its scope and target: another adoption won.
	ErrConflict = errors.New("store: adoption conflict")
	// ErrOperationReused is an operation id already used for another candidate.
	ErrOperationReused = errors.New("store: operation id reused")
	// ErrOtherScope is a candidate staged for another session.
	ErrOtherScope = errors.New("store: candidate of another session")
	// ErrCandidateExists is a candidate id staged already with other contents.
	ErrCandidateExists = errors.New("store: candidate exists")
)

// Journal kinds of self-maintenance, each journaled in the session whose request made
// the change; an entry's record is the item, candidate, adoption or selection as it is
// now.
const (
	KindWorkItem          = "work_item"             // a work item was opened
	KindWorkItemAssessed  = "work_item.assessed"    // a work item was assessed, and closed
	KindCandidate         = "orientation.candidate" // an orientation text was staged
	KindAdoption          = "orientation.adoption"  // an orientation text was adopted
	KindFrontier          = "frontier"              // a frontier was selected
	KindFrontierInstalled = "frontier.installed"    // a fold installed a selected frontier
)

// Work item states.
const (
	ItemOpen   = "open"
	ItemClosed = "closed"
)

// migration17: self-maintenance: work items, orientation candidates and adoptions, and
// frontier selections.
const migration17 = `
CREATE TABLE work_items (
	id                  {{.RowID}}, -- w-<id>
	purpose             TEXT NOT NULL,
	reason              TEXT NOT NULL,
	evidence_refs       TEXT NOT NULL, -- JSON array of refs, each resolved when it was recorded
	session_id          BIGINT NOT NULL REFERENCES sessions(id),
	execution_id        TEXT NOT NULL,
	request_id          BIGINT NOT NULL REFERENCES host_requests(id),
	skills              TEXT NOT NULL, -- JSON {id: digest}: the managed skills as it was originated
	originated_at_ms    BIGINT NOT NULL,
	state               TEXT NOT NULL CHECK (state IN ('open', 'closed')),
	outcome             TEXT CHECK (outcome IN ('no-change', 'changed', 'deferred', 'abandoned')),
	assess_session_id   BIGINT REFERENCES sessions(id),
	assess_execution_id TEXT,
	assess_request_id   BIGINT REFERENCES host_requests(id),
	changes             TEXT, -- JSON: what the assessing session changed since it was originated
	assessed_at_ms      BIGINT
);
CREATE INDEX work_items_by_state ON work_items(state, id);
CREATE TABLE orientation_candidates (
	id            {{.RowID}},
	candidate_id  TEXT NOT NULL UNIQUE,
	target        TEXT NOT NULL,
	scope_session BIGINT NOT NULL, -- 0: global; else the one session it is for
	text          TEXT NOT NULL,
	digest        TEXT NOT NULL,
	base          BIGINT NOT NULL, -- the adoption current in its scope and target when staged; 0: none
	session_id    BIGINT NOT NULL REFERENCES sessions(id),
	execution_id  TEXT NOT NULL,
	request_id    BIGINT NOT NULL REFERENCES host_requests(id),
	staged_at_ms  BIGINT NOT NULL
);
CREATE TABLE orientation_adoptions (
	id            {{.RowID}},
	candidate     BIGINT NOT NULL REFERENCES orientation_candidates(id),
	target        TEXT NOT NULL,
	scope_session BIGINT NOT NULL,
	previous      BIGINT NOT NULL, -- the adoption it replaced; 0: none
	operation_id  TEXT NOT NULL UNIQUE,
	session_id    BIGINT NOT NULL REFERENCES sessions(id),
	execution_id  TEXT NOT NULL,
	request_id    BIGINT NOT NULL REFERENCES host_requests(id),
	adopted_at_ms BIGINT NOT NULL,
	UNIQUE (scope_session, target, previous) -- one successor to each adoption: racing adoptions cannot both win
);
CREATE TABLE frontier_selections (
	id              {{.RowID}},
	session_id      BIGINT NOT NULL REFERENCES sessions(id),
	execution_id    TEXT NOT NULL,
	request_id      BIGINT NOT NULL REFERENCES host_requests(id),
	covers_through  TEXT NOT NULL, -- an evidence ref the fold covers, and everything before it
	selected_at_ms  BIGINT NOT NULL,
	fold_turn       BIGINT,       -- the turn whose end installed it; null while pending
	installed_at_ms BIGINT
);
CREATE INDEX frontier_selections_pending ON frontier_selections(session_id, installed_at_ms);
`

// Actor is the session, execution and request that wrote a record of self-maintenance.
type Actor struct {
	SessionID   int64  `json:"-"`
	Session     string `json:"session"`
	ExecutionID string `json:"execution"`
	RequestID   int64  `json:"request"` // the host request's durable id (request:<id>)
}

// WorkItem is a durable work item an agent opened about itself.
type WorkItem struct {
	ID           int64       `json:"-"`
	WorkItemID   string      `json:"work_item_id"` // w-<id>
	Purpose      string      `json:"purpose"`
	Reason       string      `json:"reason"`
	EvidenceRefs []string    `json:"evidence_refs"`
	Origin       Actor       `json:"origin"`
	State        string      `json:"state"` // ItemOpen or ItemClosed
	OriginatedAt time.Time   `json:"originated_at"`
	Assessment   *Assessment `json:"assessment,omitempty"`
	// Skills are the managed skills by id and digest as the item was originated, from
	// which an assessment tells the skills written since.
	Skills map[string]string `json:"-"`
}

// Assessment is how a work item was closed.
type Assessment struct {
	Outcome    string    `json:"outcome"`
	By         Actor     `json:"by"`
	AssessedAt time.Time `json:"assessed_at"`
	Changes    Changes   `json:"changes"`
}

// Changes are what the assessing session changed between a work item's origination and
// its assessment.
type Changes struct {
	Activations []ChangeRequest `json:"release_activations"`
	Adoptions   []ChangeRequest `json:"orientation_adoptions"`
	Skills      []SkillChange   `json:"skills_written"`
}

// ChangeRequest is a host request that changed the agent, and the answer it had.
type ChangeRequest struct {
	Ref     string         `json:"ref"` // request:<id>
	Request jsontext.Value `json:"request"`
	Value   jsontext.Value `json:"value"`
}

// SkillChange is a managed skill written: added, changed or removed.
type SkillChange struct {
	ID     string `json:"id"`
	Change string `json:"change"`
	Digest string `json:"digest,omitempty"` // its body's now; none once removed
}

// WorkItemID is the name of work item id.
func WorkItemID(id int64) string { return fmt.Sprintf("w-%d", id) }

// OpenWorkItem records item as open, unless maxOpen items are open already
// (ErrOverLimit). It sets item's ID, WorkItemID, State and OriginatedAt.
func (tx *Tx) OpenWorkItem(item *WorkItem, maxOpen int) error {
	var open int
	if err := tx.queryRow(`SELECT count(*) FROM work_items WHERE state = $1`, ItemOpen).Scan(&open); err != nil {
		return fmt.Errorf("store: work items: %w", err)
	}
	if open >= maxOpen {
		return fmt.Errorf("%w: %d work items are open", ErrOverLimit, open)
	}
	refs, err := json.Marshal(item.EvidenceRefs, json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("store: work item: %w", err)
	}
	skills, err := json.Marshal(item.Skills, json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("store: work item: %w", err)
	}
	item.State, item.OriginatedAt = ItemOpen, time.UnixMilli(ms(tx.now))
	id, err := tx.insert(`INSERT INTO work_items (purpose, reason, evidence_refs, session_id, execution_id, request_id,
		skills, originated_at_ms, state) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, item.Purpose, item.Reason, string(refs),
		item.Origin.SessionID, item.Origin.ExecutionID, item.Origin.RequestID, string(skills), ms(tx.now), ItemOpen)
	if err != nil {
		return fmt.Errorf("store: work item: %w", err)
	}
	item.ID, item.WorkItemID = id, WorkItemID(id)
	return tx.journal(item.Origin.SessionID, KindWorkItem, id)
}

// workItemColumns are what scanWorkItem reads, from work_items w joined with the
// sessions o (origin) and a (assessor).
const workItemColumns = `w.id, w.purpose, w.reason, w.evidence_refs, w.session_id, o.name, w.execution_id, w.request_id,
	w.skills, w.originated_at_ms, w.state, w.outcome, w.assess_session_id, a.name, w.assess_execution_id,
	w.assess_request_id, w.changes, w.assessed_at_ms
	FROM work_items w JOIN sessions o ON o.id = w.session_id LEFT JOIN sessions a ON a.id = w.assess_session_id`

func scanWorkItem(row interface{ Scan(...any) error }) (WorkItem, error) {
	var it WorkItem
	var refs, skills string
	var at int64
	var outcome, assessor, assessExec, changes sql.NullString
	var assessSession, assessReq, assessedAt sql.NullInt64
	if err := row.Scan(&it.ID, &it.Purpose, &it.Reason, &refs, &it.Origin.SessionID, &it.Origin.Session,
		&it.Origin.ExecutionID, &it.Origin.RequestID, &skills, &at, &it.State, &outcome, &assessSession, &assessor,
		&assessExec, &assessReq, &changes, &assessedAt); err != nil {
		return WorkItem{}, err
	}
	it.WorkItemID, it.OriginatedAt = WorkItemID(it.ID), time.UnixMilli(at)
	if err := json.Unmarshal([]byte(refs), &it.EvidenceRefs); err != nil {
		return WorkItem{}, fmt.Errorf("work item %d's refs: %w", it.ID, err)
	}
	if err := json.Unmarshal([]byte(skills), &it.Skills); err != nil {
		return WorkItem{}, fmt.Errorf("work item %d's skills: %w", it.ID, err)
	}
	if outcome.Valid {
		a := &Assessment{Outcome: outcome.String, AssessedAt: time.UnixMilli(assessedAt.Int64),
			By: Actor{SessionID: assessSession.Int64, Session: assessor.String, ExecutionID: assessExec.String, RequestID: assessReq.Int64}}
		if err := json.Unmarshal([]byte(changes.String), &a.Changes); err != nil {
			return WorkItem{}, fmt.Errorf("work item %d's changes: %w", it.ID, err)
		}
		it.Assessment = a
	}
	return it, nil
}

// workItem reads work item id in tx, or ErrNotFound.
func (tx *Tx) workItem(id int64) (WorkItem, error) {
	it, err := scanWorkItem(tx.queryRow(`SELECT `+workItemColumns+` WHERE w.id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return WorkItem{}, fmt.Errorf("%w: work item %s", ErrNotFound, WorkItemID(id))
	}
	if err != nil {
		return WorkItem{}, fmt.Errorf("store: work item %s: %w", WorkItemID(id), err)
	}
	return it, nil
}

// WorkItemByID is work item id (w-<n>), or ErrNotFound.
func (s *Store) WorkItemByID(ctx context.Context, id int64) (WorkItem, error) {
	return readByID(ctx, s, scanWorkItem, `SELECT `+workItemColumns+` WHERE w.id = $1`, "work item "+WorkItemID(id), id)
}

// readByID reads the one row query selects by id with scan, or ErrNotFound naming what.
func readByID[T any](ctx context.Context, s *Store, scan func(interface{ Scan(...any) error }) (T, error),
	query, what string, id int64) (T, error) {
	v, err := scan(s.readRow(ctx, query, id))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	if err != nil {
		return v, fmt.Errorf("store: %s: %w", what, err)
	}
	return v, nil
}

// WorkItems are the data directory's work items in state (every state for ""), oldest
// first.
func (s *Store) WorkItems(ctx context.Context, state string) ([]WorkItem, error) {
	rows, err := s.readRows(ctx, `SELECT `+workItemColumns+` WHERE $1 = '' OR w.state = $2 ORDER BY w.id`, state, state)
	if err != nil {
		return nil, fmt.Errorf("store: work items: %w", err)
	}
	defer rows.Close()
	var out []WorkItem
	for rows.Next() {
		it, err := scanWorkItem(rows)
		if err != nil {
			return nil, fmt.Errorf("store: work items: %w", err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// OpenWorkItems counts the data directory's open work items.
func (s *Store) OpenWorkItems(ctx context.Context) (int, error) {
	var n int
	if err := s.readRow(ctx, `SELECT count(*) FROM work_items WHERE state = $1`, ItemOpen).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: work items: %w", err)
	}
	return n, nil
}

// AssessWorkItem closes open work item id with outcome, by the assessing actor, with
// what that actor's session changed since the item was originated: the release
// activations and orientation adoptions it made (requests answered ok between the
// item's request and the assessing one), and the managed skills written, from skills
// (id to digest, as they are now) against the item's own. An item that is not open is
// ErrClosedItem.
func (tx *Tx) AssessWorkItem(id int64, outcome string, by Actor, skills map[string]string) (WorkItem, error) {
	it, err := tx.workItem(id)
	if err != nil {
		return WorkItem{}, err
	}
	if it.State != ItemOpen {
		return WorkItem{}, fmt.Errorf("%w: %s was assessed %s", ErrClosedItem, it.WorkItemID, it.Assessment.Outcome)
	}
	changes := Changes{Activations: []ChangeRequest{}, Adoptions: []ChangeRequest{}, Skills: skillChanges(it.Skills, skills)}
	rows, err := tx.query(`SELECT q.id, q.method, q.request, r.value FROM host_requests q JOIN host_replies r ON r.request_id = q.id
		WHERE q.session_id = $1 AND q.id > $2 AND q.id < $3 AND r.kind = 'ok' AND q.method IN ($4, $5) ORDER BY q.id`,
		by.SessionID, it.Origin.RequestID, by.RequestID, MethodBehaviorActivate, MethodOrientationAdopt)
	if err != nil {
		return WorkItem{}, fmt.Errorf("store: changes of %s: %w", it.WorkItemID, err)
	}
	for rows.Next() {
		var reqID int64
		var method, body string
		var value sql.NullString
		if err := rows.Scan(&reqID, &method, &body, &value); err != nil {
			rows.Close()
			return WorkItem{}, fmt.Errorf("store: changes of %s: %w", it.WorkItemID, err)
		}
		c := ChangeRequest{Ref: fmt.Sprintf("request:%d", reqID), Request: jsontext.Value(body), Value: jsontext.Value(value.String)}
		if method == MethodOrientationAdopt {
			changes.Adoptions = append(changes.Adoptions, c)
		} else {
			changes.Activations = append(changes.Activations, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return WorkItem{}, fmt.Errorf("store: changes of %s: %w", it.WorkItemID, err)
	}
	data, err := json.Marshal(changes, json.Deterministic(true))
	if err != nil {
		return WorkItem{}, fmt.Errorf("store: changes of %s: %w", it.WorkItemID, err)
	}
	res, err := tx.exec(`UPDATE work_items SET state = $1, outcome = $2, assess_session_id = $3, assess_execution_id = $4,
		assess_request_id = $5, changes = $6, assessed_at_ms = $7 WHERE id = $8 AND state = $9`, ItemClosed, outcome, by.SessionID,
		by.ExecutionID, by.RequestID, string(data), ms(tx.now), id, ItemOpen)
	if err != nil {
		return WorkItem{}, fmt.Errorf("store: assess %s: %w", it.WorkItemID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return WorkItem{}, fmt.Errorf("store: assess %s: %d rows, %v", it.WorkItemID, n, err)
	}
	if err := tx.journal(by.SessionID, KindWorkItemAssessed, id); err != nil {
		return WorkItem{}, err
	}
	it.State = ItemClosed
	it.Assessment = &Assessment{Outcome: outcome, By: by, AssessedAt: time.UnixMilli(ms(tx.now)), Changes: changes}
	return it, nil
}

// The methods whose answered requests an assessment lists as changes.
const (
	MethodBehaviorActivate = "behavior.activate"
	MethodOrientationAdopt = "orientation.adopt"
)

// skillChanges are the skills added, changed or removed from before to now (id to
// digest), by id.
func skillChanges(before, now map[string]string) []SkillChange {
	out := []SkillChange{}
	for _, id := range sortedKeys(before, now) {
		b, inBefore := before[id]
		n, inNow := now[id]
		switch {
		case !inBefore:
			out = append(out, SkillChange{ID: id, Change: "added", Digest: n})
		case !inNow:
			out = append(out, SkillChange{ID: id, Change: "removed"})
		case b != n:
			out = append(out, SkillChange{ID: id, Change: "changed", Digest: n})
		}
	}
	return out
}

// sortedKeys are the keys of a and b, once each, sorted.
func sortedKeys(a, b map[string]string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]string{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}
