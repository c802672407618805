package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Scope kinds of an orientation text.
const (
	ScopeGlobal  = "global"  // every session of the data directory
	ScopeSession = "session" // one session
)

// Scope is where an orientation text applies: every session, or one.
type Scope struct {
	Kind      string `json:"kind"`
	SessionID int64  `json:"-"`                 // 0 for ScopeGlobal
	Session   string `json:"session,omitempty"` // the session's name, for ScopeSession
}

// GlobalScope is the scope of every session of the data directory.
var GlobalScope = Scope{Kind: ScopeGlobal}

// SessionScope is the scope of session s alone.
func SessionScope(s Session) Scope {
	return Scope{Kind: ScopeSession, SessionID: s.ID, Session: s.Name}
}

func scopeOf(id int64, name sql.NullString) Scope {
	if id == 0 {
		return GlobalScope
	}
	return Scope{Kind: ScopeSession, SessionID: id, Session: name.String}
}

// Candidate is an orientation text staged for adoption.
type Candidate struct {
	ID          int64  `json:"-"`
	CandidateID string `json:"candidate_id"`
	Text        string `json:"text"`
	Target      string `json:"target"`
	Scope       Scope  `json:"scope"`
	Digest      string `json:"digest"`
	// Base is the adoption current in its scope and target when it was staged (0:
	// none): it is adopted only while that one still is.
	Base     int64     `json:"base"`
	StagedBy Actor     `json:"staged_by"`
	StagedAt time.Time `json:"staged_at"`
}

// Adoption is a candidate made the current text of its scope and target.
type Adoption struct {
	ID          int64     `json:"adoption"`
	CandidateID string    `json:"candidate_id"`
	Target      string    `json:"target"`
	Scope       Scope     `json:"scope"`
	Text        string    `json:"text"`
	Digest      string    `json:"digest"`
	OperationID string    `json:"operation_id"`
	Previous    int64     `json:"previous"` // the adoption it replaced; 0: none
	By          Actor     `json:"by"`
	AdoptedAt   time.Time `json:"adopted_at"`
}

// StageCandidate records c, with its Base the adoption current in its scope and target.
// A candidate id staged before with the same target, scope and text is that candidate
// again (existed); with others it is ErrCandidateExists. Past maxPending candidates not
// yet adopted, it is ErrOverLimit.
func (tx *Tx) StageCandidate(c *Candidate, maxPending int) (existed bool, err error) {
	prior, err := tx.candidate(c.CandidateID)
	switch {
	case err == nil:
		if prior.Target != c.Target || prior.Scope.SessionID != c.Scope.SessionID || prior.Text != c.Text {
			return false, fmt.Errorf("%w: candidate %s was staged with another text, target or scope", ErrCandidateExists, c.CandidateID)
		}
		*c = prior
		return true, nil
	case !errors.Is(err, ErrNotFound):
		return false, err
	}
	var pending int
	if err := tx.queryRow(`SELECT count(*) FROM orientation_candidates c
		WHERE NOT EXISTS (SELECT 1 FROM orientation_adoptions a WHERE a.candidate = c.id)`).Scan(&pending); err != nil {
		return false, fmt.Errorf("store: candidates: %w", err)
	}
	if pending >= maxPending {
		return false, fmt.Errorf("%w: %d candidates are staged and not adopted", ErrOverLimit, pending)
	}
	if c.Base, err = tx.currentAdoption(c.Scope.SessionID, c.Target); err != nil {
		return false, err
	}
	c.StagedAt = time.UnixMilli(ms(tx.now))
	c.ID, err = tx.insert(`INSERT INTO orientation_candidates (candidate_id, target, scope_session, text, digest, base,
		session_id, execution_id, request_id, staged_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, c.CandidateID, c.Target,
		c.Scope.SessionID, c.Text, c.Digest, c.Base, c.StagedBy.SessionID, c.StagedBy.ExecutionID, c.StagedBy.RequestID, ms(tx.now))
	if err != nil {
		return false, fmt.Errorf("store: stage candidate %s: %w", c.CandidateID, err)
	}
	return false, tx.journal(c.StagedBy.SessionID, KindCandidate, c.ID)
}

// CandidateByID is the candidate with row id, or ErrNotFound.
func (s *Store) CandidateByID(ctx context.Context, id int64) (Candidate, error) {
	return readByID(ctx, s, scanCandidate, `SELECT `+candidateColumns+` WHERE c.id = $1`, fmt.Sprintf("candidate %d", id), id)
}

const candidateColumns = `c.id, c.candidate_id, c.target, c.scope_session, sc.name, c.text, c.digest, c.base,
	c.session_id, s.name, c.execution_id, c.request_id, c.staged_at_ms
	FROM orientation_candidates c JOIN sessions s ON s.id = c.session_id LEFT JOIN sessions sc ON sc.id = c.scope_session`

func scanCandidate(row interface{ Scan(...any) error }) (Candidate, error) {
	var c Candidate
	var scopeID, at int64
	var scopeName sql.NullString
	err := row.Scan(&c.ID, &c.CandidateID, &c.Target, &scopeID, &scopeName, &c.Text, &c.Digest, &c.Base,
		&c.StagedBy.SessionID, &c.StagedBy.Session, &c.StagedBy.ExecutionID, &c.StagedBy.RequestID, &at)
	c.Scope, c.StagedAt = scopeOf(scopeID, scopeName), time.UnixMilli(at)
	return c, err
}

// candidate is candidate id, or ErrNotFound.
func (tx *Tx) candidate(id string) (Candidate, error) {
	c, err := scanCandidate(tx.queryRow(`SELECT `+candidateColumns+` WHERE c.candidate_id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Candidate{}, fmt.Errorf("%w: candidate %s", ErrNotFound, id)
	}
	if err != nil {
		return Candidate{}, fmt.Errorf("store: candidate %s: %w", id, err)
	}
	return c, nil
}

// currentAdoption is the id of the current adoption of scope (a session id, 0 for
// global) and target, 0 for none.
func (tx *Tx) currentAdoption(scope int64, target string) (int64, error) {
	var id sql.NullInt64
	if err := tx.queryRow(`SELECT max(id) FROM orientation_adoptions WHERE scope_session = $1 AND target = $2`,
		scope, target).Scan(&id); err != nil {
		return 0, fmt.Errorf("store: current adoption: %w", err)
	}
	return id.Int64, nil
}

// AdoptCandidate makes candidate id the current text of its scope and target, for
// operationID, by the actor by. The same operation id again is the adoption it made
// (replayed), for the same candidate; for another it is ErrOperationReused. An unknown
// candidate is ErrNotFound; one staged for another session, ErrOtherScope; one whose
// base is no longer the current adoption (another adoption came first), ErrConflict.
func (tx *Tx) AdoptCandidate(candidateID, operationID string, by Actor) (a Adoption, replayed bool, err error) {
	prior, err := scanAdoption(tx.queryRow(`SELECT `+adoptionColumns+` WHERE a.operation_id = $1`, operationID))
	switch {
	case err == nil && prior.CandidateID == candidateID:
		return prior, true, nil
	case err == nil:
		return Adoption{}, false, fmt.Errorf("%w: operation %s adopted candidate %s", ErrOperationReused, operationID, prior.CandidateID)
	case !errors.Is(err, sql.ErrNoRows):
		return Adoption{}, false, fmt.Errorf("store: adoption %s: %w", operationID, err)
	}
	c, err := tx.candidate(candidateID)
	if err != nil {
		return Adoption{}, false, err
	}
	if c.Scope.SessionID != 0 && c.Scope.SessionID != by.SessionID {
		return Adoption{}, false, fmt.Errorf("%w: candidate %s is for session %s", ErrOtherScope, candidateID, c.Scope.Session)
	}
	current, err := tx.currentAdoption(c.Scope.SessionID, c.Target)
	if err != nil {
		return Adoption{}, false, err
	}
	if current != c.Base {
		now, err := scanAdoption(tx.queryRow(`SELECT `+adoptionColumns+` WHERE a.id = $1`, current))
		if err != nil {
			return Adoption{}, false, fmt.Errorf("store: adoption %d: %w", current, err)
		}
		return Adoption{}, false, fmt.Errorf("%w: candidate %s was staged on %s, and candidate %s (adoption %d, operation %s) "+
			"has been adopted since", ErrConflict, candidateID, baseName(c.Base), now.CandidateID, now.ID, now.OperationID)
	}
	a = Adoption{CandidateID: c.CandidateID, Target: c.Target, Scope: c.Scope, Text: c.Text, Digest: c.Digest,
		OperationID: operationID, Previous: current, By: by, AdoptedAt: time.UnixMilli(ms(tx.now))}
	a.ID, err = tx.insert(`INSERT INTO orientation_adoptions (candidate, target, scope_session, previous, operation_id,
		session_id, execution_id, request_id, adopted_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, c.ID, c.Target,
		c.Scope.SessionID, current, operationID, by.SessionID, by.ExecutionID, by.RequestID, ms(tx.now))
	if err != nil {
		return Adoption{}, false, fmt.Errorf("store: adopt %s: %w", candidateID, err)
	}
	return a, false, tx.journal(by.SessionID, KindAdoption, a.ID)
}

// AdoptionByID is adoption id, or ErrNotFound.
func (s *Store) AdoptionByID(ctx context.Context, id int64) (Adoption, error) {
	return readByID(ctx, s, scanAdoption, `SELECT `+adoptionColumns+` WHERE a.id = $1`, fmt.Sprintf("adoption %d", id), id)
}

func baseName(base int64) string {
	if base == 0 {
		return "no adoption"
	}
	return fmt.Sprintf("adoption %d", base)
}

const adoptionColumns = `a.id, c.candidate_id, a.target, a.scope_session, sc.name, c.text, c.digest, a.operation_id,
	a.previous, a.session_id, s.name, a.execution_id, a.request_id, a.adopted_at_ms
	FROM orientation_adoptions a JOIN orientation_candidates c ON c.id = a.candidate
	JOIN sessions s ON s.id = a.session_id LEFT JOIN sessions sc ON sc.id = a.scope_session`

func scanAdoption(row interface{ Scan(...any) error }) (Adoption, error) {
	var a Adoption
	var scopeID, at int64
	var scopeName sql.NullString
	err := row.Scan(&a.ID, &a.CandidateID, &a.Target, &scopeID, &scopeName, &a.Text, &a.Digest, &a.OperationID,
		&a.Previous, &a.By.SessionID, &a.By.Session, &a.By.ExecutionID, &a.By.RequestID, &at)
	a.Scope, a.AdoptedAt = scopeOf(scopeID, scopeName), time.UnixMilli(at)
	return a, err
}

// CurrentAdoption is the current adoption of scope (a session id, 0 for global) and
// target; found is false when there is none.
func (s *Store) CurrentAdoption(ctx context.Context, scope int64, target string) (a Adoption, found bool, err error) {
	a, err = scanAdoption(s.readRow(ctx, `SELECT `+adoptionColumns+` WHERE a.scope_session = $1 AND a.target = $2
		ORDER BY a.id DESC LIMIT 1`, scope, target))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Adoption{}, false, nil
	case err != nil:
		return Adoption{}, false, fmt.Errorf("store: current adoption: %w", err)
	}
	return a, true, nil
}

// SessionOrientation is the adoption of target a session runs under: its own scope's
// current one, else the global one; found is false when neither has one.
func (s *Store) SessionOrientation(ctx context.Context, session int64, target string) (a Adoption, found bool, err error) {
	a, err = scanAdoption(s.readRow(ctx, `SELECT `+adoptionColumns+` WHERE a.scope_session IN (0, $1) AND a.target = $2
		ORDER BY a.scope_session DESC, a.id DESC LIMIT 1`, session, target))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Adoption{}, false, nil
	case err != nil:
		return Adoption{}, false, fmt.Errorf("store: orientation: %w", err)
	}
	return a, true, nil
}

// Adoptions are every adoption of the data directory, oldest first.
func (s *Store) Adoptions(ctx context.Context) ([]Adoption, error) {
	rows, err := s.readRows(ctx, `SELECT `+adoptionColumns+` ORDER BY a.id`)
	if err != nil {
		return nil, fmt.Errorf("store: adoptions: %w", err)
	}
	defer rows.Close()
	var out []Adoption
	for rows.Next() {
		a, err := scanAdoption(rows)
		if err != nil {
			return nil, fmt.Errorf("store: adoptions: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Candidates are every staged candidate of the data directory, oldest first.
func (s *Store) Candidates(ctx context.Context) ([]Candidate, error) {
	rows, err := s.readRows(ctx, `SELECT `+candidateColumns+` ORDER BY c.id`)
	if err != nil {
		return nil, fmt.Errorf("store: candidates: %w", err)
	}
	defer rows.Close()
	var out []Candidate
	for rows.Next() {
		c, err := scanCandidate(rows)
		if err != nil {
			return nil, fmt.Errorf("store: candidates: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// FrontierSelection is a session's request for a new frontier: a fold at the end of
// its turn.
type FrontierSelection struct {
	ID            int64      `json:"id"`
	SessionID     int64      `json:"-"`
	ExecutionID   string     `json:"execution"`
	RequestID     int64      `json:"request"`
	CoversThrough string     `json:"covers_through"`
	SelectedAt    time.Time  `json:"selected_at"`
	FoldTurn      *int64     `json:"fold_turn"` // nil while pending
	InstalledAt   *time.Time `json:"installed_at"`
}

// SelectFrontier records sel as its session's pending selection, unless one is pending
// already: then sel is that one (existed).
func (tx *Tx) SelectFrontier(sel *FrontierSelection) (existed bool, err error) {
	prior, err := scanFrontier(tx.queryRow(`SELECT `+frontierColumns+` WHERE session_id = $1 AND installed_at_ms IS NULL
		ORDER BY id LIMIT 1`, sel.SessionID))
	switch {
	case err == nil:
		*sel = prior
		return true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return false, fmt.Errorf("store: frontier selection: %w", err)
	}
	sel.SelectedAt = time.UnixMilli(ms(tx.now))
	sel.ID, err = tx.insert(`INSERT INTO frontier_selections (session_id, execution_id, request_id, covers_through, selected_at_ms)
		VALUES ($1, $2, $3, $4, $5)`, sel.SessionID, sel.ExecutionID, sel.RequestID, sel.CoversThrough, ms(tx.now))
	if err != nil {
		return false, fmt.Errorf("store: frontier selection: %w", err)
	}
	return false, tx.journal(sel.SessionID, KindFrontier, sel.ID)
}

// FrontierByID is frontier selection id, or ErrNotFound.
func (s *Store) FrontierByID(ctx context.Context, id int64) (FrontierSelection, error) {
	return readByID(ctx, s, scanFrontier, `SELECT `+frontierColumns+` WHERE id = $1`, fmt.Sprintf("frontier selection %d", id), id)
}

const frontierColumns = `id, session_id, execution_id, request_id, covers_through, selected_at_ms, fold_turn, installed_at_ms
	FROM frontier_selections`

func scanFrontier(row interface{ Scan(...any) error }) (FrontierSelection, error) {
	var f FrontierSelection
	var at int64
	var turn, installed sql.NullInt64
	err := row.Scan(&f.ID, &f.SessionID, &f.ExecutionID, &f.RequestID, &f.CoversThrough, &at, &turn, &installed)
	f.SelectedAt, f.InstalledAt = time.UnixMilli(at), scanTime(installed)
	if turn.Valid {
		f.FoldTurn = &turn.Int64
	}
	return f, err
}

// PendingFrontier is session's pending frontier selection; found is false for none.
func (s *Store) PendingFrontier(ctx context.Context, session int64) (f FrontierSelection, found bool, err error) {
	f, err = scanFrontier(s.readRow(ctx, `SELECT `+frontierColumns+` WHERE session_id = $1 AND installed_at_ms IS NULL
		ORDER BY id LIMIT 1`, session))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return FrontierSelection{}, false, nil
	case err != nil:
		return FrontierSelection{}, false, fmt.Errorf("store: frontier selection: %w", err)
	}
	return f, true, nil
}

// InstallFrontier marks session's pending selections installed by the fold at the end of
// turn.
func (s *Store) InstallFrontier(ctx context.Context, session, turn int64) error {
	return s.Update(ctx, func(tx *Tx) error {
		_, err := tx.updateJournaled(session, KindFrontierInstalled, `UPDATE frontier_selections SET fold_turn = $1,
			installed_at_ms = $2 WHERE session_id = $3 AND installed_at_ms IS NULL RETURNING id`, turn, ms(tx.now), session)
		if err != nil {
			return fmt.Errorf("store: install frontier: %w", err)
		}
		return nil
	})
}

// OrientationDigest is the digest of the orientation text session runs under (its own
// scope's adoption, else the global one), "" when none is adopted.
func (s *Store) OrientationDigest(ctx context.Context, session int64) (string, error) {
	var digest string
	err := s.readRow(ctx, `SELECT c.digest FROM orientation_adoptions a JOIN orientation_candidates c ON c.id = a.candidate
		WHERE a.scope_session IN (0, $1) ORDER BY a.scope_session DESC, a.id DESC LIMIT 1`, session).Scan(&digest)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: orientation digest: %w", err)
	}
	return digest, nil
}

// LastAdoption is the id of the data directory's newest adoption, 0 for none.
func (s *Store) LastAdoption(ctx context.Context) (int64, error) {
	var id int64
	if err := s.readRow(ctx, `SELECT coalesce(max(id), 0) FROM orientation_adoptions`).Scan(&id); err != nil {
		return 0, fmt.Errorf("store: last adoption: %w", err)
	}
	return id, nil
}
