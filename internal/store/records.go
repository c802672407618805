package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/textcut"
	"github.com/kilnrt/kiln/internal/wire"
)

// MaxEventPayloadBytes bounds one input's payload, as stored JSON.
const MaxEventPayloadBytes = 262144

// Journal kinds: what a journal entry records.
const (
	KindSession      = "session"         // a session was created
	KindKernelReset  = "kernel.reset"    // a generation started (or failed to)
	KindKernelEnd    = "kernel.end"      // a generation ended
	KindExecution    = "execution"       // a cell started
	KindExecutionEnd = "execution.end"   // a cell ended
	KindEvent        = "event"           // an input arrived
	KindRequest      = "request"         // a host request arrived
	KindReply        = "reply"           // a host request was answered
	KindEffect       = "effect"          // an effect began
	KindReceipt      = "receipt"         // an effect's outcome was recorded
	KindWait         = "wait"            // a wait was accepted
	KindWaitEnd      = "wait.end"        // a wait was woken or superseded
	KindPromptHeader = "prompt.header"   // the transcript pinned its instruction header
	KindPromptChange = "prompt.revision" // the transcript observed a changed instruction text
)

// Event sources.
const (
	SourceOperator = "operator" // the operator lane: kiln send
	SourceAgent    = "agent"    // the agent's speech on the operator lane: a confirmed local.send
)

// Execution statuses beyond the protocol's cell statuses.
const (
	StatusRunning = "running" // started, and no end recorded
	StatusFailed  = "failed"  // the host's own record of a cell that did not end normally
)

// HostEndedMessage is the error of an execution whose host ended before it did.
const HostEndedMessage = "the host ended before the cell did"

// Wait states.
const (
	WaitWaiting      = "waiting"       // the turn ended; the session waits for input or the deadline
	WaitInputPending = "input_pending" // input was already pending: the wait returned at once
	WaitWoken        = "woken"         // an input arrived while it waited
	WaitSuperseded   = "superseded"    // a later execution of the session began
)

// Session is a durable agent session: a name, its generations and its records.
type Session struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// KernelReset is the record of one generation's start.
type KernelReset struct {
	ID         int64          `json:"id"`
	SessionID  int64          `json:"-"`
	Generation string         `json:"generation"`
	StartedAt  time.Time      `json:"started_at"`
	Status     string         `json:"status"` // "started" or "failed"
	Loaded     jsontext.Value `json:"loaded"`
	Error      *string        `json:"error"`
	// EndedAt and EndCause are when and why the generation ended, once the host saw it
	// end: its exit status or signal and stderr tail, or its shutdown.
	EndedAt  *time.Time `json:"ended_at,omitempty"`
	EndCause *string    `json:"end_cause,omitempty"`
}

// Execution is the record of one cell.
type Execution struct {
	ID             int64          `json:"id"`
	SessionID      int64          `json:"-"`
	Generation     string         `json:"generation"`
	CellID         string         `json:"execution_id"`
	CodeSHA256     string         `json:"code_sha256"` // of the whole source's exact bytes
	Code           string         `json:"code"`        // as keptCode keeps it; one not UTF-8 (refused) reads with U+FFFD
	CodeBytes      int64          `json:"code_bytes"`  // the whole source's size
	Status         string         `json:"status"`
	ReportedStatus *string        `json:"reported_status,omitempty"`
	StartedAt      time.Time      `json:"started_at"`
	EndedAt        *time.Time     `json:"ended_at"`
	Output         jsontext.Value `json:"output"`
	TruncatedBytes int64          `json:"truncated_bytes"`
	Error          *string        `json:"error"`
	Exception      jsontext.Value `json:"exception"`     // what the cell raised, in parts; null if nothing
	Raw            jsontext.Value `json:"raw,omitempty"` // its raw output tails; absent if none
	NamespaceLost  bool           `json:"namespace_lost"`
	// NotRun says the cell never ran: the host refused it, or could not hand it to its
	// worker, before it started. Error says why; it has no running time.
	NotRun bool `json:"not_run,omitzero"`
	// Limit is the limit that ended the cell (memory, cpu_seconds or timeout); "" if none did.
	Limit string `json:"limit,omitempty"`
	// Behavior is the active policy as the execution started, read in the transaction
	// that recorded its start; it is not part of the record.
	Behavior Behavior `json:"-"`
}

// ExecutionEnd is how a cell ended, as the host records it.
type ExecutionEnd struct {
	Status         string
	ReportedStatus string         // the worker's status when it differs from Status; "" otherwise
	Output         jsontext.Value // JSON array of output records
	TruncatedBytes int64
	Error          *string
	Exception      jsontext.Value // JSON object of the exception's parts; empty for none
	Raw            jsontext.Value // JSON object of the raw output tails; empty for none
	NamespaceLost  bool
	NotRun         bool   // the cell never ran: refused, or never handed to its worker
	Limit          string // the limit that ended it: memory, cpu_seconds or timeout; "" if none did
	// EndedAt is when it ended, by the store's clock (Store.Now); zero means the instant
	// of the transaction that records it.
	EndedAt time.Time
}

// Event is one input, exactly as it arrived.
type Event struct {
	ID         int64          `json:"id"`
	SessionID  int64          `json:"-"`
	Source     string         `json:"source"`
	ReceivedAt time.Time      `json:"received_at"`
	Payload    jsontext.Value `json:"payload"`
	// Attention is the attention.plan decision recorded for it; null until planned.
	Attention jsontext.Value `json:"attention,omitempty"`
	// AttentionBy is the policy that made the decision: the behavior epoch and its
	// release (ActivatedAt not recorded). Nil until planned, and for a decision recorded
	// before schema 15. It is read with the event, and is not part of its JSON form.
	AttentionBy *Behavior `json:"-"`
}

func scanTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMilli(v.Int64)
	return &t
}

func nullString(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

func orNull(v jsontext.Value) any {
	if len(v) == 0 {
		return nil
	}
	return string(v)
}

func jsonOrNull(s sql.NullString) jsontext.Value {
	if !s.Valid {
		return jsontext.Value("null")
	}
	return jsontext.Value(s.String)
}

// CreateSession records a new session named name; a name already taken is an error.
func (s *Store) CreateSession(ctx context.Context, name string) (Session, error) {
	var sess Session
	err := s.Update(ctx, func(tx *Tx) error {
		var err error
		sess, err = tx.createSession(name)
		return err
	})
	return sess, err
}

func (tx *Tx) createSession(name string) (Session, error) {
	id, err := tx.insert(`INSERT INTO sessions (name, created_at_ms) VALUES ($1, $2)`, name, ms(tx.now))
	if err != nil {
		return Session{}, fmt.Errorf("store: create session %q: %w", name, err)
	}
	if err := tx.journal(id, KindSession, id); err != nil {
		return Session{}, err
	}
	return Session{ID: id, Name: name, CreatedAt: time.UnixMilli(ms(tx.now))}, nil
}

// EnsureSession returns the session named name, creating it if it does not exist; created
// says which. A session that exists is read without a write transaction.
func (s *Store) EnsureSession(ctx context.Context, name string) (sess Session, created bool, err error) {
	if sess, err = s.SessionByName(ctx, name); !errors.Is(err, ErrNotFound) {
		return sess, false, err
	}
	err = s.Update(ctx, func(tx *Tx) error {
		sess, created, err = tx.ensureSession(name)
		return err
	})
	return sess, created, err
}

// ensureSession is EnsureSession within tx.
func (tx *Tx) ensureSession(name string) (sess Session, created bool, err error) {
	var at int64
	err = tx.queryRow(`SELECT id, created_at_ms FROM sessions WHERE name = $1`, name).Scan(&sess.ID, &at)
	switch {
	case err == nil:
		sess.Name, sess.CreatedAt = name, time.UnixMilli(at)
		return sess, false, nil
	case errors.Is(err, sql.ErrNoRows):
		sess, err = tx.createSession(name)
		return sess, true, err
	default:
		return Session{}, false, fmt.Errorf("store: session %q: %w", name, err)
	}
}

// Held is a session as its one host holds it once HoldSession returns.
type Held struct {
	Session Session
	Created bool // the session was made now
	Lease   *Lease
	// Abandoned are the cells of a host that ended before they did, recorded failed now.
	Abandoned []string
}

// HoldSession is what a session's one host does as it opens the session named name,
// in one write transaction: EnsureSession, AcquireLease of SessionLeaseKey(name) and
// EndAbandoned. A lease a living process holds is refused with a *LeaseHeldError, and
// nothing is written.
func (s *Store) HoldSession(ctx context.Context, name string) (Held, error) {
	key := SessionLeaseKey(name)
	l, me, err := s.newLease(key)
	if err != nil {
		return Held{}, err
	}
	if err := s.foldDeadBacklogs(ctx); err != nil {
		return Held{}, err
	}
	var h Held
	err = s.Update(ctx, func(tx *Tx) error {
		var err error
		if h.Session, h.Created, err = tx.ensureSession(name); err != nil {
			return err
		}
		if err := tx.takeLease(l, me); err != nil {
			return err
		}
		h.Abandoned, err = tx.endAbandoned(h.Session.ID)
		return err
	})
	if err != nil {
		return Held{}, leaseError("holding session "+name, err)
	}
	s.holding(l)
	h.Lease = l
	return h, nil
}

// SessionByName returns the session named name, or ErrNotFound.
func (s *Store) SessionByName(ctx context.Context, name string) (Session, error) {
	return scanSession(s.readRow(ctx, `SELECT id, name, created_at_ms FROM sessions WHERE name = $1`, name), name)
}

// scanSession reads the session named name from row.
func scanSession(row *sql.Row, name string) (Session, error) {
	var sess Session
	var at int64
	err := row.Scan(&sess.ID, &sess.Name, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("%w: session %q", ErrNotFound, name)
	}
	if err != nil {
		return Session{}, fmt.Errorf("store: session %q: %w", name, err)
	}
	sess.CreatedAt = time.UnixMilli(at)
	return sess, nil
}

// Sessions lists every session, oldest first.
func (s *Store) Sessions(ctx context.Context) ([]Session, error) {
	rows, err := s.readRows(ctx, `SELECT id, name, created_at_ms FROM sessions ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		var sess Session
		var at int64
		if err := rows.Scan(&sess.ID, &sess.Name, &at); err != nil {
			return nil, err
		}
		sess.CreatedAt = time.UnixMilli(at)
		out = append(out, sess)
	}
	return out, rows.Err()
}

// NextGeneration reserves the session's next generation name, g-1 for the first: a
// session's generations continue across the processes that use it.
func (s *Store) NextGeneration(ctx context.Context, session int64) (string, error) {
	var n int64
	err := s.UpdateSession(ctx, session, func(tx *Tx) error {
		return tx.queryRow(`UPDATE sessions SET generations = generations + 1 WHERE id = $1 RETURNING generations`, session).Scan(&n)
	})
	if err != nil {
		return "", fmt.Errorf("store: next generation: %w", err)
	}
	return "g-" + strconv.FormatInt(n, 10), nil
}

// RecordKernelReset records a generation's start: what it loaded, or why it failed to
// start (startErr non-nil).
func (s *Store) RecordKernelReset(ctx context.Context, session int64, generation string, loaded any, startErr error) (KernelReset, error) {
	data, err := json.Marshal(loaded, json.Deterministic(true))
	if err != nil {
		return KernelReset{}, fmt.Errorf("store: kernel reset: %w", err)
	}
	kr := KernelReset{SessionID: session, Generation: generation, Status: "started", Loaded: data}
	if startErr != nil {
		msg := startErr.Error()
		kr.Status, kr.Error = "failed", &msg
	}
	err = s.UpdateSession(ctx, session, func(tx *Tx) error {
		kr.StartedAt = time.UnixMilli(ms(tx.now))
		id, err := tx.insert(`INSERT INTO kernel_resets (session_id, generation, started_at_ms, status, loaded, error)
			VALUES ($1, $2, $3, $4, $5, $6)`, session, generation, ms(tx.now), kr.Status, string(data), kr.Error)
		if err != nil {
			return fmt.Errorf("store: kernel reset: %w", err)
		}
		kr.ID = id
		return tx.journal(session, KindKernelReset, id)
	})
	return kr, err
}

// EndGeneration records that the session's generation ended, and why, as the host saw
// it end; the generation's kernel reset then carries both. A generation ends once:
// ErrNotFound for one that did not start or has ended already.
func (s *Store) EndGeneration(ctx context.Context, session int64, generation, cause string) error {
	return s.UpdateSession(ctx, session, func(tx *Tx) error {
		var id int64
		err := tx.queryRow(`UPDATE kernel_resets SET ended_at_ms = $1, end_cause = $2
			WHERE session_id = $3 AND generation = $4 AND status = 'started' AND ended_at_ms IS NULL RETURNING id`,
			ms(tx.now), cause, session, generation).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: running generation %s", ErrNotFound, generation)
		}
		if err != nil {
			return fmt.Errorf("store: end generation: %w", err)
		}
		return tx.journal(session, KindKernelEnd, id)
	})
}

// StartExecution records the start of a cell in generation and names it: c-1 for the
// session's first, and on from there across generations and processes. Waits of the
// session still open are superseded: a new cell is a new turn.
func (s *Store) StartExecution(ctx context.Context, session int64, generation, code string) (Execution, error) {
	var e *Execution
	err := s.UpdateSession(ctx, session, func(tx *Tx) error {
		// One statement takes the cell's number and reads the active policy and whether
		// a wait is open: a statement costs more than what it reads.
		var n, at int64
		var b Behavior
		var waiting bool
		err := tx.queryRow(`UPDATE sessions SET cells = cells + 1 WHERE id = $1 RETURNING cells,
			(SELECT epoch FROM behavior WHERE id = 1), (SELECT release_id FROM behavior WHERE id = 1),
			(SELECT activated_at_ms FROM behavior WHERE id = 1),
			EXISTS (SELECT 1 FROM waits WHERE session_id = $2 AND state = $3)`, session, session, WaitWaiting).
			Scan(&n, &b.Epoch, &b.ReleaseID, &at, &waiting)
		if err != nil {
			return fmt.Errorf("store: start execution: %w", err)
		}
		b.ActivatedAt = activatedAt(at)
		e = newExecution(session, generation, "c-"+strconv.FormatInt(n, 10), code, tx.now)
		e.Behavior = b
		if err := tx.insertExecution(e); err != nil {
			return err
		}
		if err := tx.journal(session, KindExecution, e.ID); err != nil {
			return err
		}
		if waiting {
			return tx.endWaits(session, WaitSuperseded, 0)
		}
		return nil
	})
	if err != nil {
		return Execution{}, err
	}
	s.noteWaiting(session, false)
	return *e, nil
}

// maxBacklogCode is the longest code whose cell's start StartNextExecution records in
// the backlog: escaped as JSON, six bytes a byte at worst, it stays within a record; and
// its record keeps it whole, as the fold digests the code it reads.
const maxBacklogCode = min(maxBacklogRecord/8, maxKeptCode)

// StartNextExecution records the start of the session's cell after prev, the last one
// it started, as StartExecution does, but as a record in the backlog: as durable, with
// no transaction of its own. It is for the session's one host (see AcquireLease), which
// alone starts its cells and opens its waits, so knows the next cell's number, and
// whether a wait may be open; the active policy is read from the database. A start goes
// to the database as a backlog record does: at this Store's next write (the cell's end,
// at the latest), or within FoldDelay. A start that has a wait to supersede, code too long
// for a record or to be kept whole, or not UTF-8, or an ephemeral Store, take
// StartExecution's transaction.
func (s *Store) StartNextExecution(ctx context.Context, prev Execution, generation, code string) (Execution, error) {
	n, ok := cellNumber(prev.CellID)
	if !ok || s.backlog == nil || len(code) > maxBacklogCode || !utf8.ValidString(code) || s.mayWait(prev.SessionID) {
		return s.StartExecution(ctx, prev.SessionID, generation, code)
	}
	// Read on the connection that writes: its cache holds what it wrote, where a read
	// connection's would have to be read again.
	var b Behavior
	var at int64
	if err := s.writerRow(ctx, behaviorQuery).Scan(&b.Epoch, &b.ReleaseID, &at); err != nil {
		return Execution{}, fmt.Errorf("store: start execution: behavior: %w", err)
	}
	b.ActivatedAt = activatedAt(at)
	e := newExecution(prev.SessionID, generation, "c-"+strconv.FormatInt(n+1, 10), code, s.now())
	started := *e // e, queued, gets its ID from the fold
	if err := s.enqueue(queued{start: e}); err != nil {
		return Execution{}, fmt.Errorf("store: start execution: %w", err)
	}
	started.Behavior = b
	return started, nil
}

// newExecution is the start of cell cellID, running since started (to the millisecond,
// as the record keeps it). It keeps what keptCode keeps of code, and the whole's digest
// and size.
func newExecution(session int64, generation, cellID, code string, started time.Time) *Execution {
	sum := sha256.Sum256([]byte(code))
	return &Execution{SessionID: session, Generation: generation, CellID: cellID, Code: keptCode(code),
		CodeBytes: int64(len(code)), CodeSHA256: hex.EncodeToString(sum[:]), Status: StatusRunning,
		StartedAt: time.UnixMilli(ms(started))}
}

// maxKeptCode bounds the source a cell's record keeps, in bytes: the protocol's bound on
// a cell's source. A cell that runs is kept whole, and one refused for its size costs the
// record no more than one that runs.
const maxKeptCode = wire.MaxCodeBytes

// keptCode is what a cell's record keeps of its source: all of it up to maxKeptCode, else
// its longest prefix within maxKeptCode that splits no character. A source that is not
// UTF-8 there has no character to keep whole, and is cut at maxKeptCode itself.
func keptCode(code string) string {
	head, cut := textcut.Prefix(code, maxKeptCode)
	if cut && len(head) <= maxKeptCode-utf8.UTFMax {
		return code[:maxKeptCode]
	}
	return head
}

// insertExecution inserts e's row, running, and sets its ID; journaling it is the caller's.
func (tx *Tx) insertExecution(e *Execution) error {
	_, err := tx.insertExecutionEnded(e, ExecutionEnd{Status: StatusRunning}, false)
	return err
}

// insertExecutionEnded inserts e's row as end leaves it (running, for a Status of
// StatusRunning) and sets its ID. With again, a row of e's cell already there is left as
// it is, and inserted is false.
func (tx *Tx) insertExecutionEnded(e *Execution, end ExecutionEnd, again bool) (inserted bool, err error) {
	columns := end.columns(tx.now)
	if end.Status == StatusRunning {
		columns[2] = nil // not ended
	}
	query := `INSERT INTO executions (session_id, generation, cell_id, code_sha256, code, code_bytes, started_at_ms,
		` + endColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`
	if again {
		query += ` ON CONFLICT (session_id, cell_id) DO NOTHING`
	}
	e.ID, err = tx.insert(query, append([]any{e.SessionID, e.Generation, e.CellID, e.CodeSHA256, e.Code, e.CodeBytes,
		ms(e.StartedAt)}, columns...)...)
	switch {
	case errors.Is(err, sql.ErrNoRows): // there already
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: start execution: %w", err)
	}
	return true, nil
}

// cellNumber is the number N of cell id c-N.
func cellNumber(cellID string) (int64, bool) {
	digits, ok := strings.CutPrefix(cellID, "c-")
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, ok && err == nil && n > 0
}

// noteWaiting notes whether a wait of session may be open, as this Store last wrote.
func (s *Store) noteWaiting(session int64, open bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if open {
		s.waiting[session] = true
	} else {
		delete(s.waiting, session)
	}
}

// mayWait reports whether this Store recorded a wait of session that no start of a cell
// of its has superseded since.
func (s *Store) mayWait(session int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[session]
}

// ending is a cell's end that a transaction records, and the row of the cell once the
// transaction's fold has recorded its start ended (0 until then).
type ending struct {
	cell Execution
	end  ExecutionEnd
	id   int64
}

// columns are the values of the execution's columns that its end sets, in the order of
// endColumns, ended at now unless end says when.
func (end ExecutionEnd) columns(now time.Time) []any {
	var reported, limit any
	if end.ReportedStatus != "" {
		reported = end.ReportedStatus
	}
	if end.Limit != "" {
		limit = end.Limit
	}
	ended := end.EndedAt
	if ended.IsZero() {
		ended = now
	}
	return []any{end.Status, reported, ms(ended), orNull(end.Output), end.TruncatedBytes, end.Error,
		orNull(end.Exception), orNull(end.Raw), end.NamespaceLost, end.NotRun, limit}
}

// Ended is e, a running cell's start as recorded, as the record reads once end is
// recorded: what ExecutionByCell returns after EndExecution(ctx, e, end), with no read.
// end.EndedAt must be set.
func (e Execution) Ended(end ExecutionEnd) Execution {
	e.Status, e.ReportedStatus, e.TruncatedBytes, e.Error = end.Status, nil, end.TruncatedBytes, end.Error
	if end.ReportedStatus != "" {
		reported := end.ReportedStatus
		e.ReportedStatus = &reported
	}
	ended := time.UnixMilli(ms(end.EndedAt))
	e.EndedAt = &ended
	e.Output, e.Exception, e.Raw = orNullJSON(end.Output), orNullJSON(end.Exception), nil
	if len(end.Raw) > 0 {
		e.Raw = end.Raw
	}
	e.NamespaceLost, e.NotRun, e.Limit = end.NamespaceLost, end.NotRun, end.Limit
	e.Code = strings.ToValidUTF8(e.Code, "\uFFFD")
	e.Behavior = Behavior{}
	return e
}

// orNullJSON is v, or JSON null when it is empty, as a nullable column reads.
func orNullJSON(v jsontext.Value) jsontext.Value {
	if len(v) == 0 {
		return jsontext.Value("null")
	}
	return v
}

// endColumns are the columns of executions that an end sets.
const endColumns = `status, reported_status, ended_at_ms, output, truncated_bytes, error, exception, raw,
	namespace_lost, not_run, limit_hit`

// EndExecution records how the session's running cell e ended. It is for the session's
// one host (see AcquireLease), which alone ends its cells. On a Store with a backlog the
// end is a record in the backlog, as durable, with no transaction of its own; it goes to
// the database as a backlog record does, at this Store's next write or within
// FoldDelay, and a start still in the backlog goes with it, as one row. An end the
// backlog cannot take (too large for a record, text that is not UTF-8, a file that
// cannot be made), or on an ephemeral Store, takes a transaction, which reports a cell
// not running as ErrNotFound; the fold of a record leaves such an end out. Either way
// the end applies to e's cell of e's generation alone.
func (s *Store) EndExecution(ctx context.Context, e Execution, end ExecutionEnd) error {
	if end.EndedAt.IsZero() {
		end.EndedAt = s.now()
	}
	x := &ending{cell: e, end: end.detached()}
	if s.backlog != nil && s.enqueue(queued{finish: x}) == nil {
		return nil
	}
	return s.updateScoped(ctx, WriteSession(e.SessionID), x, func(tx *Tx) error {
		if x.id == 0 {
			ended, err := tx.endRow(x)
			if err != nil {
				return err
			}
			if !ended {
				return fmt.Errorf("%w: running execution %s", ErrNotFound, e.CellID)
			}
		}
		return tx.journal(e.SessionID, KindExecutionEnd, x.id)
	})
}

// detached is end with copies of its own of what the caller may change after
// EndExecution returns: an end queued in the backlog is folded from memory, later.
func (end ExecutionEnd) detached() ExecutionEnd {
	if end.Error != nil {
		text := *end.Error
		end.Error = &text
	}
	end.Output, end.Exception, end.Raw = bytes.Clone(end.Output), bytes.Clone(end.Exception), bytes.Clone(end.Raw)
	return end
}

// endRow writes x's end into its cell's row, and sets x.id; ended is false when the cell
// is not running, or is another generation's of the same id (one a host that took the
// session over started).
func (tx *Tx) endRow(x *ending) (ended bool, err error) {
	err = tx.queryRow(`UPDATE executions SET (`+endColumns+`) = ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		WHERE session_id = $12 AND cell_id = $13 AND generation = $14 AND ended_at_ms IS NULL RETURNING id`,
		append(x.end.columns(tx.now), x.cell.SessionID, x.cell.CellID, x.cell.Generation)...).Scan(&x.id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: end execution: %w", err)
	}
	return true, nil
}

// EndAbandoned records as failed, with HostEndedMessage, the session's executions still
// running: those of a host that ended before its cell did. It is for the session's one
// host (see AcquireLease) as it opens the session; it returns their cell ids.
func (s *Store) EndAbandoned(ctx context.Context, session int64) ([]string, error) {
	if err := s.foldDeadBacklogs(ctx); err != nil {
		return nil, err
	}
	var cells []string
	err := s.UpdateSession(ctx, session, func(tx *Tx) error {
		var err error
		cells, err = tx.endAbandoned(session)
		return err
	})
	return cells, err
}

// foldDeadBacklogs folds the backlogs of dead hosts, before abandoned executions are
// ended. A dead host's backlog may hold its cells' starts and ends: folded first, a cell
// whose end it recorded is kept as it ended, not closed as abandoned, and the next cell
// is numbered after its cells. (A Store folds such files as it opens; a daemon's Store
// opened before that host died.)
func (s *Store) foldDeadBacklogs(ctx context.Context) error {
	if s.backlog == nil {
		return nil
	}
	if err := s.recoverBacklogs(ctx); err != nil {
		return fmt.Errorf("store: ending abandoned executions: %w", err)
	}
	return nil
}

// endAbandoned is EndAbandoned's write, within tx.
func (tx *Tx) endAbandoned(session int64) ([]string, error) {
	rows, err := tx.query(`SELECT cell_id FROM executions WHERE session_id = $1 AND ended_at_ms IS NULL ORDER BY id`, session)
	cells, err := scanStrings(rows, err)
	if err == nil {
		_, err = tx.updateJournaled(session, KindExecutionEnd, `UPDATE executions SET status = $1, ended_at_ms = $2,
			error = $3, namespace_lost = 1 WHERE session_id = $4 AND ended_at_ms IS NULL RETURNING id`,
			StatusFailed, ms(tx.now), HostEndedMessage, session)
	}
	if err != nil {
		return nil, fmt.Errorf("store: ending abandoned executions: %w", err)
	}
	return cells, nil
}

// executionColumns are the columns scanExecution reads. A row from before code_bytes
// keeps its whole source, so its size is its code's.
const executionColumns = `id, session_id, generation, cell_id, code_sha256, code,
	COALESCE(code_bytes, octet_length(code)), status, reported_status, started_at_ms, ended_at_ms,
	output, truncated_bytes, error, exception, raw, namespace_lost, not_run, limit_hit`

func scanExecution(row interface{ Scan(...any) error }) (Execution, error) {
	var e Execution
	var reported, output, errText, exception, raw, limit sql.NullString
	var started int64
	var ended sql.NullInt64
	err := row.Scan(&e.ID, &e.SessionID, &e.Generation, &e.CellID, &e.CodeSHA256, &e.Code, &e.CodeBytes, &e.Status,
		&reported, &started, &ended, &output, &e.TruncatedBytes, &errText, &exception, &raw, &e.NamespaceLost, &e.NotRun,
		&limit)
	if err != nil {
		return Execution{}, err
	}
	e.Limit = limit.String
	e.Code = strings.ToValidUTF8(e.Code, "\uFFFD")
	e.ReportedStatus, e.Error = nullString(reported), nullString(errText)
	e.StartedAt, e.EndedAt = time.UnixMilli(started), scanTime(ended)
	e.Output, e.Exception = jsonOrNull(output), jsonOrNull(exception)
	if raw.Valid {
		e.Raw = jsontext.Value(raw.String)
	}
	return e, nil
}

// ExecutionByCell returns the session's execution named cellID (c-N), or ErrNotFound.
func (s *Store) ExecutionByCell(ctx context.Context, session int64, cellID string) (Execution, error) {
	if err := s.settle(ctx); err != nil { // a running cell's start may be in the backlog
		return Execution{}, err
	}
	e, err := scanExecution(s.readRow(ctx, `SELECT `+executionColumns+` FROM executions
		WHERE session_id = $1 AND cell_id = $2`, session, cellID))
	if errors.Is(err, sql.ErrNoRows) {
		return Execution{}, fmt.Errorf("%w: execution %q", ErrNotFound, cellID)
	}
	return e, err
}

// AppendEvent records an input for session, exactly as it arrived, and wakes the
// session's open wait, if any.
func (s *Store) AppendEvent(ctx context.Context, session int64, source string, payload any) (Event, error) {
	var ev Event
	err := s.UpdateSession(ctx, session, func(tx *Tx) error {
		var err error
		ev, err = tx.AppendEvent(session, source, payload)
		return err
	})
	return ev, err
}

// AppendEvent records an input for session within the transaction, and wakes the
// session's open wait, if any.
func (tx *Tx) AppendEvent(session int64, source string, payload any) (Event, error) {
	data, err := json.Marshal(payload, json.Deterministic(true))
	if err != nil {
		return Event{}, fmt.Errorf("store: event payload: %w", err)
	}
	if len(data) > MaxEventPayloadBytes {
		return Event{}, fmt.Errorf("%w: event payload is %d bytes, over %d", ErrInvalid, len(data), MaxEventPayloadBytes)
	}
	ev := Event{SessionID: session, Source: source, Payload: data, ReceivedAt: time.UnixMilli(ms(tx.now))}
	id, err := tx.insert(`INSERT INTO events (session_id, source, received_at_ms, payload) VALUES ($1, $2, $3, $4)`,
		session, source, ms(tx.now), string(data))
	if err != nil {
		return Event{}, fmt.Errorf("store: append event: %w", err)
	}
	ev.ID = id
	if err := tx.journal(session, KindEvent, id); err != nil {
		return Event{}, err
	}
	if source == SourceAgent {
		return ev, nil // the agent's own speech wakes no wait of its own
	}
	return ev, tx.endWaits(session, WaitWoken, id)
}

// UndecidedEvents are session's inputs from sources in planned that have no attention
// decision yet, oldest first: those a host that died between recording and deciding left.
func (s *Store) UndecidedEvents(ctx context.Context, session int64, planned []string) ([]Event, error) {
	rows, err := s.readRows(ctx, `SELECT id FROM events WHERE session_id = $1 AND attention IS NULL ORDER BY id`, session)
	if err != nil {
		return nil, fmt.Errorf("store: undecided events: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: undecided events: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	var out []Event
	for _, id := range ids {
		ev, err := s.EventByID(ctx, session, id)
		if err != nil {
			return nil, err
		}
		if slices.Contains(planned, ev.Source) {
			out = append(out, ev)
		}
	}
	return out, nil
}

// SetAttention records decision as the attention.plan decision of the session's event
// id, made by the policy of behavior by (its epoch and release), unless the event has a
// decision already, recorded here or by another process. It returns the event as it is
// then, with the decision it holds: this one or the earlier one. ErrNotFound is an event
// the session does not have.
func (s *Store) SetAttention(ctx context.Context, session, id int64, by Behavior, decision any) (Event, error) {
	data, err := json.Marshal(decision, json.Deterministic(true))
	if err != nil {
		return Event{}, fmt.Errorf("store: attention of event %d: %w", id, err)
	}
	var ev Event
	err = s.UpdateSession(ctx, session, func(tx *Tx) error {
		if _, err := tx.exec(`UPDATE events SET attention = $1, attention_epoch = $2, attention_release = $3
			WHERE id = $4 AND session_id = $5 AND attention IS NULL`, string(data), by.Epoch, by.ReleaseID, id, session); err != nil {
			return fmt.Errorf("store: attention of event %d: %w", id, err)
		}
		ev, err = scanEvent(id, tx.queryRow(`SELECT `+eventColumns+` FROM events WHERE id = $1 AND session_id = $2`, id, session))
		return err
	})
	if err != nil {
		return Event{}, err
	}
	if ev.Attention == nil {
		return Event{}, fmt.Errorf("store: attention of event %d: the decision was not recorded", id)
	}
	return ev, nil
}

// eventColumns are the columns scanEvent reads.
const eventColumns = `id, session_id, source, received_at_ms, payload, attention, attention_epoch, attention_release`

// scanEvent reads event id from row, which selects eventColumns; ErrNotFound when it
// selects none.
func scanEvent(id int64, row *sql.Row) (Event, error) {
	var ev Event
	var at int64
	var payload string
	var attention, release sql.NullString
	var epoch sql.NullInt64
	err := row.Scan(&ev.ID, &ev.SessionID, &ev.Source, &at, &payload, &attention, &epoch, &release)
	if errors.Is(err, sql.ErrNoRows) {
		return Event{}, fmt.Errorf("%w: event %d", ErrNotFound, id)
	}
	if err != nil {
		return Event{}, fmt.Errorf("store: event %d: %w", id, err)
	}
	ev.ReceivedAt, ev.Payload = time.UnixMilli(at), jsontext.Value(payload)
	if attention.Valid {
		ev.Attention = jsontext.Value(attention.String)
	}
	if epoch.Valid {
		ev.AttentionBy = &Behavior{Epoch: epoch.Int64, ReleaseID: release.String}
	}
	return ev, nil
}

// EventByID returns the session's event id, or ErrNotFound.
func (s *Store) EventByID(ctx context.Context, session, id int64) (Event, error) {
	return scanEvent(id, s.readRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1 AND session_id = $2`, id, session))
}

// PromptRecord is one of a transcript's header records: a pin (type header_pin) or a
// revision (header_revision), its body the record as package transcript defines it.
type PromptRecord struct {
	ID        int64          `json:"id"`
	SessionID int64          `json:"-"`
	Type      string         `json:"type"`
	Digest    string         `json:"digest"`
	Body      jsontext.Value `json:"body"`
	At        time.Time      `json:"at"`
}

// The types of a PromptRecord, and the journal kind of each.
var promptKinds = map[string]string{"header_pin": KindPromptHeader, "header_revision": KindPromptChange}

// AppendPromptRecord records a header record of session: typ header_pin or
// header_revision, body its JSON, digest the instruction text it reaches.
func (s *Store) AppendPromptRecord(ctx context.Context, session int64, typ, digest string, body any) (PromptRecord, error) {
	kind, ok := promptKinds[typ]
	if !ok {
		return PromptRecord{}, fmt.Errorf("%w: prompt record type %q", ErrInvalid, typ)
	}
	data, err := json.Marshal(body, json.Deterministic(true))
	if err != nil {
		return PromptRecord{}, fmt.Errorf("store: prompt record: %w", err)
	}
	rec := PromptRecord{SessionID: session, Type: typ, Digest: digest, Body: data}
	err = s.UpdateSession(ctx, session, func(tx *Tx) error {
		rec.At = time.UnixMilli(ms(tx.now))
		id, err := tx.insert(`INSERT INTO prompt_records (session_id, type, digest, body, at_ms) VALUES ($1, $2, $3, $4, $5)`,
			session, typ, digest, string(data), ms(tx.now))
		if err != nil {
			return fmt.Errorf("store: append prompt record: %w", err)
		}
		rec.ID = id
		return tx.journal(session, kind, id)
	})
	return rec, err
}

// PromptRecordByID returns the session's header record id, or ErrNotFound.
func (s *Store) PromptRecordByID(ctx context.Context, session, id int64) (PromptRecord, error) {
	rec := PromptRecord{ID: id, SessionID: session}
	var at int64
	var body string
	err := s.readRow(ctx, `SELECT type, digest, body, at_ms FROM prompt_records WHERE id = $1 AND session_id = $2`,
		id, session).Scan(&rec.Type, &rec.Digest, &body, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return PromptRecord{}, fmt.Errorf("%w: prompt record %d", ErrNotFound, id)
	}
	if err != nil {
		return PromptRecord{}, fmt.Errorf("store: prompt record %d: %w", id, err)
	}
	rec.At, rec.Body = time.UnixMilli(at), jsontext.Value(body)
	return rec, nil
}

// ErrStaleEpoch is an activation whose expected epoch is not the database's.
var ErrStaleEpoch = errors.New("store: stale behavior epoch")

// InitialReleaseID is the identity of kiln's initial policy release, which epoch 0 names
// before any activation: the digest internal/policy/testdata/behavior.json fixes, which
// package policy's tests check its built-in tree has.
const InitialReleaseID = "78703f927e3e7801b5b2f0cb7aacf5658aad76b5a7144eb85452a5627f5a3a9c"

// Behavior is the active policy: the epoch, which only activation advances, and the
// identity of the release that epoch names (InitialReleaseID for epoch 0).
type Behavior struct {
	Epoch       int64     `json:"epoch"`
	ReleaseID   string    `json:"release_id"`
	ActivatedAt time.Time `json:"activated_at,omitzero"` // zero for the initial policy
}

// behaviorQuery reads the active policy's row.
const behaviorQuery = `SELECT epoch, release_id, activated_at_ms FROM behavior WHERE id = 1`

// Behavior returns the active policy.
func (s *Store) Behavior(ctx context.Context) (Behavior, error) {
	var b Behavior
	var at int64
	err := s.readRow(ctx, behaviorQuery).Scan(&b.Epoch, &b.ReleaseID, &at)
	if err != nil {
		return Behavior{}, fmt.Errorf("store: behavior: %w", err)
	}
	b.ActivatedAt = activatedAt(at)
	return b, nil
}

// activatedAt is the instant a behavior row's activated_at_ms names; the initial policy,
// which no activation began (stored as 0), has none: the zero time.
func activatedAt(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ActivateBehavior makes releaseID the active policy if the epoch is still expected: a
// compare-and-swap, the only way the active policy changes. A stale expectation changes
// nothing and returns ErrStaleEpoch.
func (s *Store) ActivateBehavior(ctx context.Context, expected int64, releaseID string) (Behavior, error) {
	var b Behavior
	err := s.Update(ctx, func(tx *Tx) error {
		res, err := tx.exec(`UPDATE behavior SET epoch = epoch + 1, release_id = $1, activated_at_ms = $2 WHERE id = 1 AND epoch = $3`,
			releaseID, ms(tx.now), expected)
		if err != nil {
			return fmt.Errorf("store: activate: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: expected epoch %d", ErrStaleEpoch, expected)
		}
		b = Behavior{Epoch: expected + 1, ReleaseID: releaseID, ActivatedAt: time.UnixMilli(ms(tx.now))}
		return nil
	})
	return b, err
}

// EffectOf returns the effect of kind that the request (executionID, requestID) of
// session started, if there is one, preferring one with its receipt: what makes a
// retried request idempotent.
func (s *Store) EffectOf(ctx context.Context, session int64, executionID, requestID, kind string) (Effect, bool, error) {
	var id int64
	err := s.readRow(ctx, `SELECT e.id FROM effects e JOIN host_requests r ON r.id = e.request_id
		WHERE r.session_id = $1 AND r.execution_id = $2 AND r.request_id = $3 AND e.kind = $4
		ORDER BY e.receipt IS NULL, e.id LIMIT 1`,
		session, executionID, requestID, kind).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return Effect{}, false, nil
	}
	if err != nil {
		return Effect{}, false, fmt.Errorf("store: effect of %s/%s: %w", executionID, requestID, err)
	}
	e, err := s.EffectByID(ctx, session, id)
	return e, err == nil, err
}
