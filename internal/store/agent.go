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

// The journal kinds of the agent's records.
const (
	KindTurnStart = "turn.start" // a turn began
	KindTurnEnd   = "turn.end"   // a turn ended, with its one end reason
	KindModelCall = "model_call" // a model call was made, failed or not
	KindFold      = "fold"       // the conversation was folded into a summary
)

// AgentRecord is one of the agent's records: its kind (a journal kind), the turn it
// belongs to, and its body as package agent defines it.
type AgentRecord struct {
	ID        int64          `json:"id"`
	SessionID int64          `json:"-"`
	Kind      string         `json:"kind"`
	Turn      int64          `json:"turn"`
	Body      jsontext.Value `json:"body"`
	At        time.Time      `json:"at"`
}

// AppendAgentRecord records one of the agent's records of session.
func (s *Store) AppendAgentRecord(ctx context.Context, session int64, kind string, turn int64, body any) (AgentRecord, error) {
	switch kind {
	case KindTurnStart, KindTurnEnd, KindModelCall, KindFold, KindReview, KindDecision:
	default:
		return AgentRecord{}, fmt.Errorf("%w: agent record kind %q", ErrInvalid, kind)
	}
	data, err := json.Marshal(body, json.Deterministic(true))
	if err != nil {
		return AgentRecord{}, fmt.Errorf("store: agent record: %w", err)
	}
	rec := AgentRecord{SessionID: session, Kind: kind, Turn: turn, Body: data}
	err = s.Update(ctx, func(tx *Tx) error {
		rec.At = time.UnixMilli(ms(tx.now))
		id, err := tx.insert(`INSERT INTO agent_records (session_id, kind, turn, body, at_ms) VALUES ($1, $2, $3, $4, $5)`,
			session, kind, turn, string(data), ms(tx.now))
		if err != nil {
			return fmt.Errorf("store: append agent record: %w", err)
		}
		rec.ID = id
		return tx.journal(session, kind, id)
	})
	return rec, err
}

// AgentRecordByID returns the session's agent record id, or ErrNotFound.
func (s *Store) AgentRecordByID(ctx context.Context, session, id int64) (AgentRecord, error) {
	rec := AgentRecord{ID: id, SessionID: session}
	var at int64
	var body string
	err := s.readRow(ctx, `SELECT kind, turn, body, at_ms FROM agent_records WHERE id = $1 AND session_id = $2`,
		id, session).Scan(&rec.Kind, &rec.Turn, &body, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return AgentRecord{}, fmt.Errorf("%w: agent record %d", ErrNotFound, id)
	}
	if err != nil {
		return AgentRecord{}, fmt.Errorf("store: agent record %d: %w", id, err)
	}
	rec.At, rec.Body = time.UnixMilli(at), jsontext.Value(body)
	return rec, nil
}

// AgentRecords returns the session's agent records in order (session 0: every
// session's).
func (s *Store) AgentRecords(ctx context.Context, session int64) ([]AgentRecord, error) {
	rows, err := s.readRows(ctx, `SELECT id, session_id, kind, turn, body, at_ms FROM agent_records
		WHERE $1 = 0 OR session_id = $2 ORDER BY id`, session, session)
	if err != nil {
		return nil, fmt.Errorf("store: agent records: %w", err)
	}
	defer rows.Close()
	var out []AgentRecord
	for rows.Next() {
		var rec AgentRecord
		var at int64
		var body string
		if err := rows.Scan(&rec.ID, &rec.SessionID, &rec.Kind, &rec.Turn, &body, &at); err != nil {
			return nil, fmt.Errorf("store: agent records: %w", err)
		}
		rec.At, rec.Body = time.UnixMilli(at), jsontext.Value(body)
		out = append(out, rec)
	}
	return out, rows.Err()
}

// OpenWait is the session's wait still waiting, if one is: the wait a yielded cell left
// for the agent to wake from.
func (s *Store) OpenWait(ctx context.Context, session int64) (Wait, bool, error) {
	var id int64
	err := s.readRow(ctx, `SELECT id FROM waits WHERE session_id = $1 AND state = $2 ORDER BY id DESC LIMIT 1`,
		session, WaitWaiting).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return Wait{}, false, nil
	}
	if err != nil {
		return Wait{}, false, fmt.Errorf("store: open wait: %w", err)
	}
	w, err := s.WaitByID(ctx, session, id)
	return w, err == nil, err
}

// Undelivered are the session's inputs not yet handed to its agent, oldest first, at
// most limit, each with its attention decision: what the agent's inbox holds.
func (s *Store) Undelivered(ctx context.Context, session int64, limit int) ([]Event, error) {
	rows, err := s.readRows(ctx, `SELECT e.id, e.source, e.received_at_ms, e.payload, e.attention FROM events e
		JOIN sessions s ON s.id = e.session_id WHERE e.session_id = $1 AND e.id > s.delivered_event_id
		AND e.source <> $2 ORDER BY e.id LIMIT $3`, session, SourceAgent, limit)
	if err != nil {
		return nil, fmt.Errorf("store: undelivered events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		ev := Event{SessionID: session}
		var at int64
		var payload string
		var attention sql.NullString
		if err := rows.Scan(&ev.ID, &ev.Source, &at, &payload, &attention); err != nil {
			return nil, fmt.Errorf("store: undelivered events: %w", err)
		}
		ev.ReceivedAt, ev.Payload = time.UnixMilli(at), jsontext.Value(payload)
		if attention.Valid {
			ev.Attention = jsontext.Value(attention.String)
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// Deliver marks the session's inputs up to event id as handed to its agent.
func (s *Store) Deliver(ctx context.Context, session, id int64) error {
	return s.UpdateSession(ctx, session, func(tx *Tx) error { return tx.Deliver(session, id) })
}

// LastSeq is the sequence number of the session's newest journal entry, 0 for none.
func (s *Store) LastSeq(ctx context.Context, session int64) (int64, error) {
	if err := s.settle(ctx); err != nil {
		return 0, err
	}
	var seq sql.NullInt64
	if err := s.readRow(ctx, `SELECT max(seq) FROM journal WHERE session_id = $1`, session).Scan(&seq); err != nil {
		return 0, fmt.Errorf("store: last seq: %w", err)
	}
	return seq.Int64, nil
}

// LastEntry is the journal's last sequence number and when it was recorded; 0 and the
// zero time for an empty journal.
func (s *Store) LastEntry(ctx context.Context) (int64, time.Time, error) {
	if err := s.settle(ctx); err != nil {
		return 0, time.Time{}, err
	}
	var seq, at sql.NullInt64
	err := s.readRow(ctx, `SELECT seq, at_ms FROM journal ORDER BY seq DESC LIMIT 1`).Scan(&seq, &at)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, fmt.Errorf("store: last entry: %w", err)
	}
	return seq.Int64, fromMS(at), nil
}

// EventSeq is the journal sequence number of the session's event id.
func (s *Store) EventSeq(ctx context.Context, session, id int64) (int64, error) {
	var seq int64
	err := s.readRow(ctx, `SELECT seq FROM journal WHERE session_id = $1 AND kind = $2 AND ref_id = $3`,
		session, KindEvent, id).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: event %d", ErrNotFound, id)
	}
	if err != nil {
		return 0, fmt.Errorf("store: event %d: %w", id, err)
	}
	return seq, nil
}
