package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Request is a host request as it arrived from a worker.
type Request struct {
	ID          int64          `json:"id"` // 0 until recorded
	SessionID   int64          `json:"-"`
	Generation  string         `json:"generation"`
	ExecutionID string         `json:"execution_id"`
	RequestID   string         `json:"request_id"` // the worker's identity for it
	Method      string         `json:"method"`
	Body        jsontext.Value `json:"request"`
	ReceivedAt  time.Time      `json:"received_at"`
}

// Reply is the host's answer to a request: Kind "ok" with a Value, or "error" with a
// Code and a Message.
type Reply struct {
	Kind      string         `json:"kind"`
	Value     jsontext.Value `json:"value,omitempty"`
	Code      string         `json:"code,omitempty"`
	Message   string         `json:"message,omitempty"`
	RepliedAt time.Time      `json:"replied_at"`
}

// Effect is something a request did to the world, with its receipt once known.
type Effect struct {
	ID        int64          `json:"id"`
	RequestID int64          `json:"request"`
	Kind      string         `json:"kind"`
	Detail    jsontext.Value `json:"detail"`
	StartedAt time.Time      `json:"started_at"`
	Receipt   jsontext.Value `json:"receipt"` // null until the outcome is recorded
	EndedAt   *time.Time     `json:"ended_at"`
}

// Wait is an accepted runtime.wait.
type Wait struct {
	ID          int64      `json:"id"`
	RequestID   int64      `json:"request"`
	SessionID   int64      `json:"-"`
	ExecutionID string     `json:"execution_id"`
	Seconds     *float64   `json:"seconds"`
	Reason      string     `json:"reason"`
	CreatedAt   time.Time  `json:"created_at"`
	Deadline    *time.Time `json:"deadline"`
	State       string     `json:"state"`
	EventID     *int64     `json:"event_id"` // the input that ended it
	EndedAt     *time.Time `json:"ended_at"`
}

// InsertRequest records req, setting its ID and ReceivedAt.
func (tx *Tx) InsertRequest(req *Request) error {
	if req.ReceivedAt.IsZero() {
		req.ReceivedAt = tx.now
	}
	id, err := tx.insert(`INSERT INTO host_requests (session_id, generation, execution_id, request_id, method, request, received_at_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, req.SessionID, req.Generation, req.ExecutionID, req.RequestID, req.Method,
		string(req.Body), ms(req.ReceivedAt))
	if err != nil {
		return fmt.Errorf("store: record request: %w", err)
	}
	req.ID = id
	return tx.journal(req.SessionID, KindRequest, id)
}

// InsertReply records the reply to request (its recorded ID) of session.
func (tx *Tx) InsertReply(session, request int64, r Reply) error {
	if r.RepliedAt.IsZero() {
		r.RepliedAt = tx.now
	}
	value, code, message := replyColumns(r)
	if _, err := tx.exec(`INSERT INTO host_replies (request_id, kind, value, code, message, replied_at_ms)
		VALUES ($1, $2, $3, $4, $5, $6)`, request, r.Kind, value, code, message, ms(r.RepliedAt)); err != nil {
		return fmt.Errorf("store: record reply: %w", err)
	}
	return tx.journal(session, KindReply, request)
}

// replyColumns are a reply's value, code and message columns: JSON (null when absent)
// for an ok reply, code and message for an error.
func replyColumns(r Reply) (value, code, message any) {
	if r.Kind != "ok" {
		return nil, r.Code, r.Message
	}
	if len(r.Value) == 0 {
		return "null", nil, nil
	}
	return string(r.Value), nil, nil
}

// StartEffect records that request (of session) begins an effect of kind, described by
// detail, and returns its id.
func (tx *Tx) StartEffect(session, request int64, kind string, detail any) (int64, error) {
	data, err := json.Marshal(detail, json.Deterministic(true))
	if err != nil {
		return 0, fmt.Errorf("store: effect detail: %w", err)
	}
	id, err := tx.insert(`INSERT INTO effects (request_id, kind, detail, started_at_ms) VALUES ($1, $2, $3, $4)`,
		request, kind, string(data), ms(tx.now))
	if err != nil {
		return 0, fmt.Errorf("store: start effect: %w", err)
	}
	return id, tx.journal(session, KindEffect, id)
}

// StartEffectOnce is StartEffect for an effect one request identity makes at most once:
// when a request of the same session, execution and worker request id as request has
// started an effect of kind already, it starts none and returns that effect's id, with
// started false. The look and the start are one transaction, so two requests of one
// identity never both start an effect, whichever process records them.
func (tx *Tx) StartEffectOnce(session, request int64, kind string, detail any) (id int64, started bool, err error) {
	err = tx.queryRow(`SELECT e.id FROM host_requests q
		JOIN host_requests r ON r.session_id = q.session_id AND r.execution_id = q.execution_id AND r.request_id = q.request_id
		JOIN effects e ON e.request_id = r.id
		WHERE q.id = $1 AND q.session_id = $2 AND e.kind = $3 ORDER BY e.id LIMIT 1`, request, session, kind).Scan(&id)
	switch {
	case err == nil:
		return id, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, false, fmt.Errorf("store: start effect: the request's earlier effect: %w", err)
	}
	id, err = tx.StartEffect(session, request, kind, detail)
	return id, err == nil, err
}

// FinishEffect records effect id's receipt.
func (tx *Tx) FinishEffect(session, id int64, receipt any) error {
	data, err := json.Marshal(receipt, json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("store: receipt: %w", err)
	}
	res, err := tx.exec(`UPDATE effects SET receipt = $1, ended_at_ms = $2 WHERE id = $3 AND receipt IS NULL`,
		string(data), ms(tx.now), id)
	if err != nil {
		return fmt.Errorf("store: receipt: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: open effect %d", ErrNotFound, id)
	}
	return tx.journal(session, KindReceipt, id)
}

// PendingEvents returns the session's inputs not yet handed to its agent, oldest first,
// at most limit of them: inputs from others, never the agent's own speech (SourceAgent).
func (tx *Tx) PendingEvents(session int64, limit int) ([]Event, error) {
	return scanEvents(session)(tx.query(pendingEventsQuery, session, limit))
}

// PendingStaleness is how old a view of pending inputs PendingEventsAsOf may hand out:
// how long an input another process records (kiln send) may go unseen by it. Inputs
// this Store records are seen at once.
const PendingStaleness = 5 * time.Millisecond

// pendingView is what PendingEventsAsOf read for one session and limit, and when.
type pendingView struct {
	events  []Event
	at      time.Time
	commits uint64 // the Store's commits when it was read
}

// PendingEventsAsOf returns what Tx.PendingEvents does, outside any transaction, as of
// the instant it returns: a view read then, or one read at most PendingStaleness before
// with nothing committed by this Store since.
func (s *Store) PendingEventsAsOf(ctx context.Context, session int64, limit int) ([]Event, time.Time, error) {
	key := [2]int64{session, int64(limit)}
	commits := s.commits.Load()
	now := s.now()
	s.mu.Lock()
	view, ok := s.pending[key]
	s.mu.Unlock()
	if ok && view.commits == commits && now.Sub(view.at) < PendingStaleness && !now.Before(view.at) {
		return view.events, view.at, nil
	}
	// Read at every cell's inspect: a context that can be cancelled would cost goroutines
	// to watch it.
	events, err := scanEvents(session)(s.readRows(context.WithoutCancel(ctx), pendingEventsQuery, session, limit))
	if err != nil {
		return nil, time.Time{}, err
	}
	s.mu.Lock()
	if s.pending != nil {
		s.pending[key] = pendingView{events: events, at: now, commits: commits}
	}
	s.mu.Unlock()
	return events, now, nil
}

// pendingEventsQuery selects the inputs pending for a session: from others (the
// operator, peers, external sources), never the agent's own speech.
const pendingEventsQuery = `SELECT e.id, e.source, e.received_at_ms, e.payload FROM events e
	JOIN sessions s ON s.id = e.session_id WHERE e.session_id = $1 AND e.id > s.delivered_event_id
	AND e.source <> '` + SourceAgent + `' ORDER BY e.id LIMIT $2`

// scanEvents reads the events of session that rows select (id, source, received_at_ms,
// payload).
func scanEvents(session int64) func(rows *sql.Rows, err error) ([]Event, error) {
	return func(rows *sql.Rows, err error) ([]Event, error) {
		if err != nil {
			return nil, fmt.Errorf("store: pending events: %w", err)
		}
		defer rows.Close()
		var out []Event
		for rows.Next() {
			ev := Event{SessionID: session}
			var at int64
			var payload string
			if err := rows.Scan(&ev.ID, &ev.Source, &at, &payload); err != nil {
				return nil, err
			}
			ev.ReceivedAt, ev.Payload = time.UnixMilli(at), jsontext.Value(payload)
			out = append(out, ev)
		}
		return out, rows.Err()
	}
}

// Deliver marks the session's inputs up to event id as handed to its agent.
func (tx *Tx) Deliver(session, id int64) error {
	_, err := tx.exec(`UPDATE sessions SET delivered_event_id = $1 WHERE id = $2 AND delivered_event_id < $1`, id, session)
	if err != nil {
		return fmt.Errorf("store: deliver: %w", err)
	}
	return nil
}

// InsertWait records an accepted wait, setting its ID.
func (tx *Tx) InsertWait(w *Wait) error {
	if w.Seconds != nil && (math.IsNaN(*w.Seconds) || math.IsInf(*w.Seconds, 0)) {
		return fmt.Errorf("%w: wait seconds %v", ErrInvalid, *w.Seconds)
	}
	w.CreatedAt = time.UnixMilli(ms(tx.now))
	var deadline any
	if w.Deadline != nil {
		deadline = ms(*w.Deadline)
	}
	var ended any
	if w.State != WaitWaiting {
		ended = ms(tx.now)
		t := w.CreatedAt
		w.EndedAt = &t
	}
	id, err := tx.insert(`INSERT INTO waits (request_id, session_id, execution_id, seconds, reason, created_at_ms,
		deadline_ms, state, event_id, ended_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		w.RequestID, w.SessionID, w.ExecutionID, w.Seconds, w.Reason, ms(tx.now), deadline, w.State, w.EventID, ended)
	if err != nil {
		return fmt.Errorf("store: record wait: %w", err)
	}
	w.ID = id
	if w.State == WaitWaiting {
		tx.s.noteWaiting(w.SessionID, true) // noted before the commit: a rollback leaves it noted, which only costs
	}
	return tx.journal(w.SessionID, KindWait, id)
}

// endWaits moves the session's waiting waits to state, naming event (0 for none).
func (tx *Tx) endWaits(session int64, state string, event int64) error {
	var ev any
	if event != 0 {
		ev = event
	}
	_, err := tx.updateJournaled(session, KindWaitEnd, `UPDATE waits SET state = $1, event_id = $2, ended_at_ms = $3
		WHERE session_id = $4 AND state = $5 RETURNING id`, state, ev, ms(tx.now), session, WaitWaiting)
	if err != nil {
		return fmt.Errorf("store: end waits: %w", err)
	}
	return nil
}

// updateJournaled runs query, an UPDATE … RETURNING id, and journals each row it
// changed as kind; it returns their ids.
func (tx *Tx) updateJournaled(session int64, kind, query string, args ...any) ([]int64, error) {
	rows, err := tx.query(query, args...)
	var ids []int64
	if err == nil {
		for rows.Next() {
			var id int64
			if err = rows.Scan(&id); err != nil {
				break
			}
			ids = append(ids, id)
		}
		rows.Close()
		err = errors.Join(err, rows.Err())
	}
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := tx.journal(session, kind, id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// scanStrings reads the one text column rows select.
func scanStrings(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// RequestByID returns the session's request id and its reply (nil while unanswered), or
// ErrNotFound.
func (s *Store) RequestByID(ctx context.Context, session, id int64) (Request, *Reply, error) {
	req := Request{ID: id, SessionID: session}
	var at int64
	var body string
	var kind, value, code, message sql.NullString
	var replied sql.NullInt64
	err := s.readRow(ctx, `SELECT q.generation, q.execution_id, q.request_id, q.method, q.request, q.received_at_ms,
		r.kind, r.value, r.code, r.message, r.replied_at_ms
		FROM host_requests q LEFT JOIN host_replies r ON r.request_id = q.id WHERE q.id = $1 AND q.session_id = $2`, id, session).
		Scan(&req.Generation, &req.ExecutionID, &req.RequestID, &req.Method, &body, &at, &kind, &value, &code, &message, &replied)
	if errors.Is(err, sql.ErrNoRows) {
		return Request{}, nil, fmt.Errorf("%w: request %d", ErrNotFound, id)
	}
	if err != nil {
		return Request{}, nil, fmt.Errorf("store: request %d: %w", id, err)
	}
	req.Body, req.ReceivedAt = jsontext.Value(body), time.UnixMilli(at)
	if !kind.Valid {
		return req, nil, nil
	}
	r := &Reply{Kind: kind.String, Code: code.String, Message: message.String, RepliedAt: time.UnixMilli(replied.Int64)}
	if value.Valid {
		r.Value = jsontext.Value(value.String)
	}
	return req, r, nil
}

// EffectByID returns the session's effect id, or ErrNotFound.
func (s *Store) EffectByID(ctx context.Context, session, id int64) (Effect, error) {
	var e Effect
	var detail string
	var receipt sql.NullString
	var started int64
	var ended sql.NullInt64
	err := s.readRow(ctx, `SELECT e.id, e.request_id, e.kind, e.detail, e.started_at_ms, e.receipt, e.ended_at_ms
		FROM effects e JOIN host_requests q ON q.id = e.request_id WHERE e.id = $1 AND q.session_id = $2`, id, session).
		Scan(&e.ID, &e.RequestID, &e.Kind, &detail, &started, &receipt, &ended)
	if errors.Is(err, sql.ErrNoRows) {
		return Effect{}, fmt.Errorf("%w: effect %d", ErrNotFound, id)
	}
	if err != nil {
		return Effect{}, fmt.Errorf("store: effect %d: %w", id, err)
	}
	e.Detail, e.StartedAt, e.Receipt, e.EndedAt = jsontext.Value(detail), time.UnixMilli(started), jsonOrNull(receipt), scanTime(ended)
	return e, nil
}

// WaitByID returns the session's wait id, or ErrNotFound.
func (s *Store) WaitByID(ctx context.Context, session, id int64) (Wait, error) {
	w := Wait{SessionID: session}
	var seconds sql.NullFloat64
	var created int64
	var deadline, ended, event sql.NullInt64
	err := s.readRow(ctx, `SELECT id, request_id, execution_id, seconds, reason, created_at_ms, deadline_ms,
		state, event_id, ended_at_ms FROM waits WHERE id = $1 AND session_id = $2`, id, session).
		Scan(&w.ID, &w.RequestID, &w.ExecutionID, &seconds, &w.Reason, &created, &deadline, &w.State, &event, &ended)
	if errors.Is(err, sql.ErrNoRows) {
		return Wait{}, fmt.Errorf("%w: wait %d", ErrNotFound, id)
	}
	if err != nil {
		return Wait{}, fmt.Errorf("store: wait %d: %w", id, err)
	}
	if seconds.Valid {
		w.Seconds = &seconds.Float64
	}
	if event.Valid {
		w.EventID = &event.Int64
	}
	w.CreatedAt, w.Deadline, w.EndedAt = time.UnixMilli(created), scanTime(deadline), scanTime(ended)
	return w, nil
}

// KernelResetByID returns the session's kernel reset id, or ErrNotFound.
func (s *Store) KernelResetByID(ctx context.Context, session, id int64) (KernelReset, error) {
	kr := KernelReset{ID: id, SessionID: session}
	var at int64
	var loaded string
	var errText, cause sql.NullString
	var ended sql.NullInt64
	err := s.readRow(ctx, `SELECT generation, started_at_ms, status, loaded, error, ended_at_ms, end_cause FROM kernel_resets
		WHERE id = $1 AND session_id = $2`, id, session).Scan(&kr.Generation, &at, &kr.Status, &loaded, &errText, &ended, &cause)
	if errors.Is(err, sql.ErrNoRows) {
		return KernelReset{}, fmt.Errorf("%w: kernel reset %d", ErrNotFound, id)
	}
	if err != nil {
		return KernelReset{}, fmt.Errorf("store: kernel reset %d: %w", id, err)
	}
	kr.StartedAt, kr.Loaded, kr.Error = time.UnixMilli(at), jsontext.Value(loaded), nullString(errText)
	kr.EndedAt, kr.EndCause = scanTime(ended), nullString(cause)
	return kr, nil
}

// ExecutionByID returns the session's execution with row id id, or ErrNotFound.
func (s *Store) ExecutionByID(ctx context.Context, session, id int64) (Execution, error) {
	e, err := scanExecution(s.readRow(ctx, `SELECT `+executionColumns+` FROM executions
		WHERE session_id = $1 AND id = $2`, session, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Execution{}, fmt.Errorf("%w: execution %d", ErrNotFound, id)
	}
	return e, err
}
