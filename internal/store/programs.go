package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The journal kinds of a program run.
const (
	KindProgram    = "program"     // a program run started
	KindProgramEnd = "program.end" // a program run ended
)

// HostEndedRunMessage is the error of a program run whose host ended before it did.
const HostEndedRunMessage = "the host ended before the program run did"

// MaxProgramCode bounds the source a program run's record keeps, in bytes: a longer one
// is cut there (at a character's start), its digest and size still those of the whole.
const MaxProgramCode = 262144

// ProgramRun is a program run recorded in a session: its source, and once it ended, how.
// Its tool calls are host requests whose ExecutionID is its RunID.
type ProgramRun struct {
	ID           int64      `json:"id"`
	SessionID    int64      `json:"-"`
	RunID        string     `json:"run_id"` // p-1, p-2, …
	CodeSHA256   string     `json:"code_sha256"`
	Code         string     `json:"code"`
	CodeBytes    int64      `json:"code_bytes"`
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at"`
	Status       *string    `json:"status"` // nil while it runs
	Error        *string    `json:"error"`
	RefusedCalls int64      `json:"refused_calls"`
}

// StartProgram records the start of a program run of session and names it: p-1 for the
// session's first, and on from there, across processes. This process is recorded as the
// run's owner, as a lease's holder is (see EndAbandonedPrograms).
func (s *Store) StartProgram(ctx context.Context, session int64, code string) (ProgramRun, error) {
	sum := sha256.Sum256([]byte(code))
	kept := code
	if len(kept) > MaxProgramCode {
		n := MaxProgramCode
		for n > 0 && !utf8.RuneStart(kept[n]) {
			n--
		}
		kept = kept[:n]
	}
	p := ProgramRun{SessionID: session, CodeSHA256: hex.EncodeToString(sum[:]), Code: kept, CodeBytes: int64(len(code))}
	me, err := self()
	if err != nil {
		return ProgramRun{}, fmt.Errorf("store: start program: %w", err)
	}
	err = s.Update(ctx, func(tx *Tx) error {
		var n int64
		if err := tx.queryRow(`UPDATE sessions SET programs = programs + 1 WHERE id = $1 RETURNING programs`, session).Scan(&n); err != nil {
			return fmt.Errorf("store: start program: %w", err)
		}
		p.RunID = "p-" + strconv.FormatInt(n, 10)
		p.StartedAt = time.UnixMilli(ms(tx.now))
		id, err := tx.insert(`INSERT INTO program_runs (session_id, run_id, code_sha256, code, code_bytes, started_at_ms,
			owner_pid, owner_start, owner_hostname) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			session, p.RunID, p.CodeSHA256, p.Code, p.CodeBytes, ms(tx.now), me.Pid, me.Start, me.Hostname)
		if err != nil {
			return fmt.Errorf("store: start program: %w", err)
		}
		p.ID = id
		return tx.journal(session, KindProgram, id)
	})
	return p, err
}

// ProgramEnd is how a program run ended: its status, its error ("" for none), how
// many tool calls were refused past the cap and not recorded, and the reply recorded
// for each of its calls still without one (an error reply: the run ended before it).
type ProgramEnd struct {
	Status     string
	Error      string
	Refused    int64
	Unanswered Reply
}

// EndProgram records how program run id ended, and answers its calls still without a
// reply with end.Unanswered, before the end in the journal.
func (s *Store) EndProgram(ctx context.Context, id int64, end ProgramEnd) error {
	return s.Update(ctx, func(tx *Tx) error { return tx.endProgram(id, end) })
}

// endProgram records how program run id ended, as EndProgram does.
func (tx *Tx) endProgram(id int64, end ProgramEnd) error {
	var e any
	if end.Error != "" {
		e = end.Error
	}
	var session int64
	var runID string
	err := tx.queryRow(`SELECT session_id, run_id FROM program_runs WHERE id = $1 AND ended_at_ms IS NULL`, id).Scan(&session, &runID)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: running program %d", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("store: end program: %w", err)
	}
	at := end.Unanswered.RepliedAt
	if at.IsZero() {
		at = tx.now
	}
	_, code, message := replyColumns(end.Unanswered)
	if _, err := tx.updateJournaled(session, KindReply, `INSERT INTO host_replies (request_id, kind, code, message, replied_at_ms)
		SELECT q.id, 'error', $1, $2, $3 FROM host_requests q
		WHERE q.session_id = $4 AND q.generation = '' AND q.execution_id = $5
			AND NOT EXISTS (SELECT 1 FROM host_replies p WHERE p.request_id = q.id)
		ORDER BY q.id RETURNING request_id`, code, message, ms(at), session, runID); err != nil {
		return fmt.Errorf("store: end program: answering its calls: %w", err)
	}
	if _, err := tx.exec(`UPDATE program_runs SET ended_at_ms = $1, status = $2, error = $3, refused_calls = $4 WHERE id = $5`,
		ms(tx.now), end.Status, e, end.Refused, id); err != nil {
		return fmt.Errorf("store: end program: %w", err)
	}
	return tx.journal(session, KindProgramEnd, id)
}

// EndAbandonedPrograms records as failed, with HostEndedRunMessage, the session's program
// runs still running whose owner is dead (as a lease's holder is judged dead), and
// answers their calls still without a reply with unanswered(run id). It returns their
// run ids.
func (s *Store) EndAbandonedPrograms(ctx context.Context, session int64, unanswered func(runID string) Reply) ([]string, error) {
	me, err := self()
	if err != nil {
		return nil, fmt.Errorf("store: ending abandoned program runs: %w", err)
	}
	var ended []string
	err = s.Update(ctx, func(tx *Tx) error {
		ended = nil
		rows, err := tx.query(`SELECT id, run_id, owner_pid, owner_start, owner_hostname FROM program_runs
			WHERE session_id = $1 AND ended_at_ms IS NULL ORDER BY id`, session)
		if err != nil {
			return err
		}
		type open struct {
			id    int64
			runID string
			owner Holder
		}
		var runs []open
		for rows.Next() {
			var r open
			if err := rows.Scan(&r.id, &r.runID, &r.owner.Pid, &r.owner.Start, &r.owner.Hostname); err != nil {
				rows.Close()
				return err
			}
			runs = append(runs, r)
		}
		if err := errors.Join(rows.Close(), rows.Err()); err != nil {
			return err
		}
		for _, r := range runs {
			if alive(r.owner, me) {
				continue
			}
			if err := tx.endProgram(r.id, ProgramEnd{Status: StatusFailed, Error: HostEndedRunMessage, Unanswered: unanswered(r.runID)}); err != nil {
				return err
			}
			ended = append(ended, r.runID)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: ending abandoned program runs: %w", err)
	}
	return ended, nil
}

// ProgramByID returns the session's program run id, or ErrNotFound.
func (s *Store) ProgramByID(ctx context.Context, session, id int64) (ProgramRun, error) {
	p := ProgramRun{ID: id, SessionID: session}
	var started int64
	var ended sql.NullInt64
	var status, errText sql.NullString
	err := s.readRow(ctx, `SELECT run_id, code_sha256, code, code_bytes, started_at_ms, ended_at_ms, status, error,
		refused_calls FROM program_runs WHERE id = $1 AND session_id = $2`, id, session).
		Scan(&p.RunID, &p.CodeSHA256, &p.Code, &p.CodeBytes, &started, &ended, &status, &errText, &p.RefusedCalls)
	if errors.Is(err, sql.ErrNoRows) {
		return ProgramRun{}, fmt.Errorf("%w: program run %d", ErrNotFound, id)
	}
	if err != nil {
		return ProgramRun{}, fmt.Errorf("store: program run %d: %w", id, err)
	}
	p.Code = strings.ToValidUTF8(p.Code, "\uFFFD")
	p.StartedAt, p.EndedAt = time.UnixMilli(started), scanTime(ended)
	p.Status, p.Error = nullString(status), nullString(errText)
	return p, nil
}
