package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// This file holds the record of peers: sessions that a session (their parent) opened,
// the requests the parent sent each, and the records both sessions' streams show of them.
// The rules — who may address what, the bounds, which state follows which — are package
// peer's; the store keeps what it decided, each change in one transaction.

// Journal kinds of peer records, each journaled in the parent's and the peer's session.
const (
	KindPeerOpened  = "peer.opened"  // a session opened a peer
	KindPeerRequest = "peer.request" // a parent sent its peer a request, or cancelled one
	KindPeerResult  = "peer.result"  // a request reached a final state, or asked its parent for input
	KindPeerStopped = "peer.stopped" // a peer stopped, or began to drain
)

// Source of the inputs that carry peer requests, results and cancellations.
const SourcePeer = "peer"

// ErrSessionExists is a peer opened under a session name the record holds already.
var ErrSessionExists = errors.New("store: session exists")

// migration18: peers, their requests, and the records of both; and epoch 0 names kiln's
// initial release as it now is, which plans the inputs of source peer (decisions made
// before name the release that made them).
const migration18 = `
CREATE TABLE peers (
	id                {{.RowID}},
	parent_session_id BIGINT NOT NULL REFERENCES sessions(id),
	session_id        BIGINT NOT NULL UNIQUE REFERENCES sessions(id),
	mode              TEXT NOT NULL,
	depth             BIGINT NOT NULL, -- 1: the parent is no one's peer
	origin            TEXT NOT NULL,    -- JSON: the evidence refs resolved and the request that opened it
	state             TEXT NOT NULL CHECK (state IN ('open', 'draining', 'stopped')),
	opened_at_ms      BIGINT NOT NULL,
	drain_deadline_ms BIGINT,          -- a draining peer stops by then
	stopped_at_ms     BIGINT,
	stop_reason       TEXT
);
CREATE INDEX peers_by_parent ON peers(parent_session_id, id);
CREATE TABLE peer_requests (
	id                {{.RowID}},
	peer              BIGINT NOT NULL REFERENCES peers(id),
	parent_session_id BIGINT NOT NULL REFERENCES sessions(id),
	request_id        TEXT NOT NULL,    -- the parent's
	content           TEXT NOT NULL,
	digest            TEXT NOT NULL,    -- of the peer, content and evidence: the same request again
	evidence          TEXT NOT NULL,    -- JSON array of refs, each resolved when it was sent
	state             TEXT NOT NULL CHECK (state IN ('submitted', 'working', 'input_required',
		'completed', 'failed', 'canceled', 'rejected')),
	result            TEXT,             -- JSON, once the peer submitted one
	detail            TEXT,             -- why it was cancelled or failed
	input_event_id    BIGINT NOT NULL REFERENCES events(id), -- the peer's input
	result_event_id   BIGINT REFERENCES events(id),          -- the parent's input of its final state
	created_at_ms     BIGINT NOT NULL,
	updated_at_ms     BIGINT NOT NULL,
	UNIQUE (parent_session_id, request_id)
);
CREATE INDEX peer_requests_by_peer ON peer_requests(peer, state);
UPDATE behavior SET release_id = '78703f927e3e7801b5b2f0cb7aacf5658aad76b5a7144eb85452a5627f5a3a9c'
	WHERE epoch = 0 AND release_id = 'b69c207ca9467c752881ff84641cade53013a27d8c142cf3a0374551867a4247';
CREATE TABLE peer_records (
	id    {{.RowID}},
	peer  BIGINT NOT NULL REFERENCES peers(id),
	kind  TEXT NOT NULL CHECK (kind IN ('peer.opened', 'peer.request', 'peer.result', 'peer.stopped')),
	body  TEXT NOT NULL, -- JSON: the record, as package peer defines it
	at_ms BIGINT NOT NULL
);
`

// Peer is a session another session opened, as the record holds it.
type Peer struct {
	ID            int64          `json:"-"`
	ParentID      int64          `json:"-"`
	Parent        string         `json:"parent"`
	SessionID     int64          `json:"-"`
	Session       string         `json:"session"`
	Mode          string         `json:"mode"`
	Depth         int            `json:"depth"`
	Origin        jsontext.Value `json:"origin"`
	State         string         `json:"state"`
	OpenedAt      time.Time      `json:"opened_at"`
	DrainDeadline *time.Time     `json:"drain_deadline,omitempty"`
	StoppedAt     *time.Time     `json:"stopped_at,omitempty"`
	StopReason    string         `json:"stop_reason,omitempty"`
}

// PeerRequest is a request a parent sent its peer.
type PeerRequest struct {
	ID            int64          `json:"-"`
	Peer          int64          `json:"-"` // the peer's row
	PeerSession   string         `json:"peer_id"`
	ParentID      int64          `json:"-"`
	RequestID     string         `json:"request_id"`
	Content       string         `json:"content"`
	Digest        string         `json:"-"`
	Evidence      []string       `json:"evidence"`
	State         string         `json:"state"`
	Result        jsontext.Value `json:"result,omitempty"`
	Detail        string         `json:"detail,omitempty"`
	InputEventID  int64          `json:"input_event_id"`
	ResultEventID *int64         `json:"result_event_id,omitempty"`
	CreatedAt     time.Time      `json:"created_at"`
	UpdatedAt     time.Time      `json:"updated_at"`
	// Taken says the peer's agent has taken the request's input from its inbox.
	Taken bool `json:"-"`
}

// PeerRecord is a record of a peer that both its sessions' journals name.
type PeerRecord struct {
	ID   int64          `json:"id"`
	Kind string         `json:"kind"`
	Body jsontext.Value `json:"body"`
	At   time.Time      `json:"at"`
}

const peerColumns = `p.id, p.parent_session_id, ps.name, p.session_id, s.name, p.mode, p.depth, p.origin, p.state,
	p.opened_at_ms, p.drain_deadline_ms, p.stopped_at_ms, COALESCE(p.stop_reason, '')
	FROM peers p JOIN sessions s ON s.id = p.session_id JOIN sessions ps ON ps.id = p.parent_session_id`

func scanPeer(row interface{ Scan(...any) error }) (Peer, error) {
	var p Peer
	var origin string
	var opened int64
	var drain, stopped sql.NullInt64
	err := row.Scan(&p.ID, &p.ParentID, &p.Parent, &p.SessionID, &p.Session, &p.Mode, &p.Depth, &origin, &p.State,
		&opened, &drain, &stopped, &p.StopReason)
	if errors.Is(err, sql.ErrNoRows) {
		return Peer{}, ErrNotFound
	}
	if err != nil {
		return Peer{}, fmt.Errorf("store: peer: %w", err)
	}
	p.Origin, p.OpenedAt, p.DrainDeadline, p.StoppedAt = jsontext.Value(origin), time.UnixMilli(opened), scanTime(drain), scanTime(stopped)
	return p, nil
}

const peerRequestColumns = `r.id, r.peer, s.name, r.parent_session_id, r.request_id, r.content, r.digest, r.evidence,
	r.state, r.result, ` + peerRequestRest

// briefPeerRequestColumns are peerRequestColumns without the content and the result,
// which a peer's summary does not show: it reads many requests in little memory.
const briefPeerRequestColumns = `r.id, r.peer, s.name, r.parent_session_id, r.request_id, '', r.digest, r.evidence,
	r.state, NULL, ` + peerRequestRest

const peerRequestRest = `COALESCE(r.detail, ''), r.input_event_id, r.result_event_id, r.created_at_ms, r.updated_at_ms,
	s.delivered_event_id >= r.input_event_id
	FROM peer_requests r JOIN peers p ON p.id = r.peer JOIN sessions s ON s.id = p.session_id`

// openPeerRequest is the condition of a request not yet in a final state.
const openPeerRequest = `r.state IN ('submitted', 'working', 'input_required')`

func scanPeerRequest(row interface{ Scan(...any) error }) (PeerRequest, error) {
	var r PeerRequest
	var evidence string
	var result sql.NullString
	var resultEvent sql.NullInt64
	var created, updated int64
	err := row.Scan(&r.ID, &r.Peer, &r.PeerSession, &r.ParentID, &r.RequestID, &r.Content, &r.Digest, &evidence,
		&r.State, &result, &r.Detail, &r.InputEventID, &resultEvent, &created, &updated, &r.Taken)
	if errors.Is(err, sql.ErrNoRows) {
		return PeerRequest{}, ErrNotFound
	}
	if err != nil {
		return PeerRequest{}, fmt.Errorf("store: peer request: %w", err)
	}
	if err := json.Unmarshal([]byte(evidence), &r.Evidence); err != nil {
		return PeerRequest{}, fmt.Errorf("store: peer request %d: evidence: %w", r.ID, err)
	}
	if result.Valid {
		r.Result = jsontext.Value(result.String)
	}
	if resultEvent.Valid {
		r.ResultEventID = &resultEvent.Int64
	}
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(created), time.UnixMilli(updated)
	return r, nil
}

// OpenPeer records a new session named p.Session as a peer of session p.ParentID, in
// state open, and sets p's ids. A session of that name in the record is
// ErrSessionExists: a peer never continues another session's record.
func (tx *Tx) OpenPeer(p *Peer) error {
	var n int
	if err := tx.queryRow(`SELECT count(*) FROM sessions WHERE name = $1`, p.Session).Scan(&n); err != nil {
		return fmt.Errorf("store: open peer: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %s", ErrSessionExists, p.Session)
	}
	sess, err := tx.createSession(p.Session)
	if err != nil {
		return err
	}
	p.SessionID, p.State, p.OpenedAt = sess.ID, "open", time.UnixMilli(ms(tx.now))
	p.ID, err = tx.insert(`INSERT INTO peers (parent_session_id, session_id, mode, depth, origin, state, opened_at_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, p.ParentID, p.SessionID, p.Mode, p.Depth, string(p.Origin), p.State, ms(tx.now))
	if err != nil {
		return fmt.Errorf("store: open peer: %w", err)
	}
	return nil
}

// PeerBySession is the peer whose session is session; ErrNotFound when it is no one's peer.
func (tx *Tx) PeerBySession(session int64) (Peer, error) {
	return scanPeer(tx.queryRow(`SELECT `+peerColumns+` WHERE p.session_id = $1`, session))
}

// PeerBySession is the peer whose session is session; ErrNotFound when it is no one's peer.
func (s *Store) PeerBySession(ctx context.Context, session int64) (Peer, error) {
	return scanPeer(s.readRow(ctx, `SELECT `+peerColumns+` WHERE p.session_id = $1`, session))
}

// PeerByName is the peer whose session is named name; ErrNotFound when there is none.
func (s *Store) PeerByName(ctx context.Context, name string) (Peer, error) {
	return scanPeer(s.readRow(ctx, `SELECT `+peerColumns+` WHERE s.name = $1`, name))
}

// PeersOf are the peers session opened, oldest first.
func (s *Store) PeersOf(ctx context.Context, session int64) ([]Peer, error) {
	return collect(scanPeer)(s.readRows(ctx, `SELECT `+peerColumns+` WHERE p.parent_session_id = $1 ORDER BY p.id`, session))
}

// LivePeers are the peers not stopped, of every session, oldest first.
func (s *Store) LivePeers(ctx context.Context) ([]Peer, error) {
	return collect(scanPeer)(s.readRows(ctx, `SELECT `+peerColumns+` WHERE p.state != 'stopped' ORDER BY p.id`))
}

// CountLivePeers counts the peers of session that are not stopped.
func (tx *Tx) CountLivePeers(session int64) (int, error) {
	var n int
	err := tx.queryRow(`SELECT count(*) FROM peers WHERE parent_session_id = $1 AND state != 'stopped'`, session).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: peers: %w", err)
	}
	return n, nil
}

// CountPeers counts the peers session ever opened.
func (tx *Tx) CountPeers(session int64) (int, error) {
	var n int
	if err := tx.queryRow(`SELECT count(*) FROM peers WHERE parent_session_id = $1`, session).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: peers: %w", err)
	}
	return n, nil
}

// SetPeerState records peer's state: the stop's reason for a stopped one, the drain's
// deadline for a draining one.
func (tx *Tx) SetPeerState(peer int64, state, reason string, deadline *time.Time) error {
	var stopped, drain any
	if state == "stopped" {
		stopped = ms(tx.now)
	}
	if deadline != nil {
		drain = ms(*deadline)
	}
	_, err := tx.exec(`UPDATE peers SET state = $1, stop_reason = NULLIF($2, ''), stopped_at_ms = $3,
		drain_deadline_ms = COALESCE($4, drain_deadline_ms) WHERE id = $5`, state, reason, stopped, drain, peer)
	if err != nil {
		return fmt.Errorf("store: peer state: %w", err)
	}
	return nil
}

// InsertPeerRequest records r, setting its id and times.
func (tx *Tx) InsertPeerRequest(r *PeerRequest) error {
	evidence, err := json.Marshal(r.Evidence)
	if err != nil {
		return fmt.Errorf("store: peer request: %w", err)
	}
	r.CreatedAt = time.UnixMilli(ms(tx.now))
	r.UpdatedAt = r.CreatedAt
	r.ID, err = tx.insert(`INSERT INTO peer_requests (peer, parent_session_id, request_id, content, digest, evidence,
		state, input_event_id, created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		r.Peer, r.ParentID, r.RequestID, r.Content, r.Digest, string(evidence), r.State, r.InputEventID, ms(tx.now), ms(tx.now))
	if err != nil {
		return fmt.Errorf("store: peer request: %w", err)
	}
	return nil
}

// PeerRequestOf is the request parent sent under requestID; ErrNotFound when it sent none.
func (tx *Tx) PeerRequestOf(parent int64, requestID string) (PeerRequest, error) {
	return scanPeerRequest(tx.queryRow(`SELECT `+peerRequestColumns+` WHERE r.parent_session_id = $1 AND r.request_id = $2`,
		parent, requestID))
}

// PeerRequestOf is the request parent sent under requestID; ErrNotFound when it sent none.
func (s *Store) PeerRequestOf(ctx context.Context, parent int64, requestID string) (PeerRequest, error) {
	return scanPeerRequest(s.readRow(ctx, `SELECT `+peerRequestColumns+` WHERE r.parent_session_id = $1 AND r.request_id = $2`,
		parent, requestID))
}

// PeerRequestTo is the request requestID addressed to the peer whose session is session;
// ErrNotFound when there is none.
func (tx *Tx) PeerRequestTo(session int64, requestID string) (PeerRequest, error) {
	return scanPeerRequest(tx.queryRow(`SELECT `+peerRequestColumns+` WHERE p.session_id = $1 AND r.request_id = $2`,
		session, requestID))
}

// PeerRequests are the requests sent to peer (its row), oldest first.
func (s *Store) PeerRequests(ctx context.Context, peer int64) ([]PeerRequest, error) {
	return collect(scanPeerRequest)(s.readRows(ctx, `SELECT `+peerRequestColumns+` WHERE r.peer = $1 ORDER BY r.id`, peer))
}

// OpenPeerRequests are the requests to peer (its row) not yet in a final state.
func (tx *Tx) OpenPeerRequests(peer int64) ([]PeerRequest, error) {
	return collect(scanPeerRequest)(tx.query(`SELECT `+peerRequestColumns+` WHERE r.peer = $1 AND `+openPeerRequest+
		` ORDER BY r.id`, peer))
}

// CountOpenPeerRequests counts the requests to peer (its row) not yet in a final state.
func (tx *Tx) CountOpenPeerRequests(peer int64) (int, error) {
	var n int
	if err := tx.queryRow(`SELECT count(*) FROM peer_requests r WHERE r.peer = $1 AND `+openPeerRequest, peer).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: peer requests: %w", err)
	}
	return n, nil
}

// PeerRequestSummary is how many requests were sent to peer (its row), and those not
// yet in a final state, oldest first, without their content or results: in memory
// bounded by their number, however large their results.
func (s *Store) PeerRequestSummary(ctx context.Context, peer int64) (sent int, open []PeerRequest, err error) {
	if err := s.readRow(ctx, `SELECT count(*) FROM peer_requests WHERE peer = $1`, peer).Scan(&sent); err != nil {
		return 0, nil, fmt.Errorf("store: peer requests: %w", err)
	}
	open, err = collect(scanPeerRequest)(s.readRows(ctx, `SELECT `+briefPeerRequestColumns+` WHERE r.peer = $1 AND `+
		openPeerRequest+` ORDER BY r.id`, peer))
	return sent, open, err
}

// SetPeerRequest records r's state, content, digest, evidence, input, result, detail and
// result event as r holds them: a follow-up of a request that asked for input replaces
// its content, evidence and input.
func (tx *Tx) SetPeerRequest(r *PeerRequest) error {
	var result any
	if r.Result != nil {
		result = string(r.Result)
	}
	evidence, err := json.Marshal(r.Evidence)
	if err != nil {
		return fmt.Errorf("store: peer request: %w", err)
	}
	r.UpdatedAt = time.UnixMilli(ms(tx.now))
	_, err = tx.exec(`UPDATE peer_requests SET state = $1, content = $2, digest = $3, evidence = $4, input_event_id = $5,
		result = $6, detail = NULLIF($7, ''), result_event_id = $8, updated_at_ms = $9 WHERE id = $10`,
		r.State, r.Content, r.Digest, string(evidence), r.InputEventID, result, r.Detail, r.ResultEventID, ms(tx.now), r.ID)
	if err != nil {
		return fmt.Errorf("store: peer request: %w", err)
	}
	return nil
}

// AppendPeerRecord records a record of peer, of kind and body, in the journals of its
// parent and of the peer itself.
func (tx *Tx) AppendPeerRecord(peer Peer, kind string, body any) (PeerRecord, error) {
	data, err := json.Marshal(body, json.Deterministic(true))
	if err != nil {
		return PeerRecord{}, fmt.Errorf("store: peer record: %w", err)
	}
	rec := PeerRecord{Kind: kind, Body: data, At: time.UnixMilli(ms(tx.now))}
	if rec.ID, err = tx.insert(`INSERT INTO peer_records (peer, kind, body, at_ms) VALUES ($1, $2, $3, $4)`,
		peer.ID, kind, string(data), ms(tx.now)); err != nil {
		return PeerRecord{}, fmt.Errorf("store: peer record: %w", err)
	}
	for _, session := range []int64{peer.ParentID, peer.SessionID} {
		if err := tx.journal(session, kind, rec.ID); err != nil {
			return PeerRecord{}, err
		}
	}
	return rec, nil
}

// PeerRecordByID is the peer record id, as a journal entry of session names it.
func (s *Store) PeerRecordByID(ctx context.Context, session, id int64) (PeerRecord, error) {
	var rec PeerRecord
	var body string
	var at int64
	err := s.readRow(ctx, `SELECT r.id, r.kind, r.body, r.at_ms FROM peer_records r JOIN peers p ON p.id = r.peer
		WHERE r.id = $1 AND $2 IN (p.parent_session_id, p.session_id)`, id, session).Scan(&rec.ID, &rec.Kind, &body, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return PeerRecord{}, ErrNotFound
	}
	if err != nil {
		return PeerRecord{}, fmt.Errorf("store: peer record %d: %w", id, err)
	}
	rec.Body, rec.At = jsontext.Value(body), time.UnixMilli(at)
	return rec, nil
}

// collect reads every row of rows (and err, from the query) with scan.
func collect[T any](scan func(interface{ Scan(...any) error }) (T, error)) func(rows *sql.Rows, err error) ([]T, error) {
	return func(rows *sql.Rows, err error) ([]T, error) {
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		defer rows.Close()
		var out []T
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		return out, nil
	}
}

// SessionByName is the session named name, or ErrNotFound, within tx.
func (tx *Tx) SessionByName(name string) (Session, error) {
	return scanSession(tx.queryRow(`SELECT id, name, created_at_ms FROM sessions WHERE name = $1`, name), name)
}

// Busy says whether a cell of session runs, or a turn of its agent, as the record says.
func (s *Store) Busy(ctx context.Context, session int64) (bool, error) {
	if err := s.settle(ctx); err != nil {
		return false, err
	}
	var busy bool
	err := s.readRow(ctx, `SELECT EXISTS (SELECT 1 FROM executions WHERE session_id = $1 AND status = 'running')
		OR (SELECT count(*) FROM agent_records WHERE session_id = $2 AND kind = 'turn.start')
			> (SELECT count(*) FROM agent_records WHERE session_id = $3 AND kind = 'turn.end')`,
		session, session, session).Scan(&busy)
	if err != nil {
		return false, fmt.Errorf("store: busy: %w", err)
	}
	return busy, nil
}
