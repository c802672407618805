// Package store is kiln's durable record: one SQLite file under the data directory that
// holds sessions, their generations (kernel resets), executions, inputs (events), host
// requests and their replies, effects with their receipts, and waits — what a person
// later reads to learn what an agent did.
//
// The database runs in WAL mode with foreign keys on and a busy timeout, so that several
// kiln processes may share it. Every write is one IMMEDIATE transaction: it either commits
// whole or leaves nothing, so a host killed at any point leaves a database that opens,
// passes PRAGMA integrity_check, and holds no half-recorded effect. Commits use
// synchronous=NORMAL: a committed transaction survives the death of the process; after a
// power loss the last few commits may be rolled back, never torn. No commit copies the
// WAL into the database file: a checkpointer on a connection of its own does, every
// CheckpointCommits commits (see checkpointer).
//
// Every record also gets a row in the journal, whose sequence number orders the whole
// record and is what `kiln log --since` counts.
//
// A request the host answered without changing anything is recorded through the backlog
// (see RecordAnswered), as durably and at a fraction of a transaction's cost.
//
// Writes go through one connection; reads through a pool of their own, so that a read
// never waits behind a write.
package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// FileName is the database file's name inside the data directory.
const FileName = "kiln.db"

// MaxReadConns bounds the connections a Store reads through, for every reader together
// (event streams, long polls, the agent): past it a read waits for one to be free, so
// that many readers cost waits, not descriptors.
const MaxReadConns = 8

// BusyTimeout is how long a write waits for another process's write to finish.
const BusyTimeout = 5 * time.Second

// Errors a caller tells apart with errors.Is.
var (
	// ErrNotFound is a record that does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrNoDataDir is a default data directory that cannot be determined: neither
	// XDG_DATA_HOME nor HOME is set.
	ErrNoDataDir = errors.New("store: no data directory: set XDG_DATA_HOME or HOME, or name one")
	// ErrSchemaTooNew is a database written by a newer kiln than this one.
	ErrSchemaTooNew = errors.New("store: database schema is newer than this kiln")
	// ErrInvalid is a value the store refuses to record, such as an oversized payload.
	ErrInvalid = errors.New("store: invalid record")
)

// Options configure a Store. The zero value is ready to use.
type Options struct {
	Logger *slog.Logger     // nil discards
	Now    func() time.Time // the clock; nil means time.Now
	// ReadOnly opens an existing database for reading only (see openReadOnly): nothing
	// is created, migrated, folded or written.
	ReadOnly bool
}

// Store is an open durable record. It is safe for concurrent use; writes are serialized.
type Store struct {
	db      *sql.DB // the one connection that writes
	reads   *sql.DB // the connections that read; db itself for an ephemeral store
	path    string
	backlog *backlog      // nil for an ephemeral store
	ckpt    *checkpointer // nil for an ephemeral store
	log     *slog.Logger
	now     func() time.Time

	writeMu writeLock // held by each Update

	mu        sync.Mutex
	stmts     map[string]*sql.Stmt // prepared statements of db by query text
	readStmts map[string]*sql.Stmt // prepared statements of reads by query text
	pending   map[[2]int64]pendingView
	waiting   map[int64]bool // sessions with a wait this Store recorded that may be open

	commits  atomic.Uint64 // transactions this Store has committed
	watchers watchers      // the readers a commit wakes (see Watch)
}

// DefaultDir is the data directory when none is named: $XDG_DATA_HOME/kiln, else
// ~/.local/share/kiln. getenv reads the environment (os.Getenv in a program).
func DefaultDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "kiln"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "kiln"), nil
	}
	return "", ErrNoDataDir
}

// OpenDir opens the record in data directory dir, creating the directory (0700) and the
// database if they do not exist; with opts.ReadOnly it creates nothing, and a database
// that does not exist is ErrNoRecord.
func OpenDir(ctx context.Context, dir string, opts Options) (*Store, error) {
	if opts.ReadOnly {
		return Open(ctx, filepath.Join(dir, FileName), opts)
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("store: data directory: %w", err)
	}
	if err := secureDir(dir, cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))); err != nil {
		return nil, err
	}
	// Made before SQLite opens it, the database is the owner's alone from the start, and
	// so are its -wal and -shm, which take its mode; one made looser before is tightened.
	if f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR|os.O_CREATE, FileMode); err == nil {
		f.Close()
	}
	if err := secureFiles(dir); err != nil {
		return nil, err
	}
	return Open(ctx, filepath.Join(dir, FileName), opts)
}

// Open opens the database file at path, creating and migrating it as needed. An empty
// path opens an ephemeral database in memory, which every method serves alike and which
// is gone once closed.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReadOnly {
		return openReadOnly(ctx, path, opts)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_txlock", "immediate")
	dsn := ":memory:?" + q.Encode()
	if path != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		path = abs
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		// The checkpointer copies the WAL into the database, not a commit (see checkpointer).
		// A savepoint's journal (a fold's) stays in memory: past 64 KiB SQLite would spill
		// it to a temporary file, made and removed in the transaction.
		dsn = "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode() +
			"&_pragma=wal_autocheckpoint(0)&_pragma=temp_store(MEMORY)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// One connection: writes are serialized in the process (other processes wait on the
	// busy timeout), and an in-memory database lives exactly as long as it does.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := newStore(db, path, opts)
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %s: %w", displayPath(path), err)
	}
	if path == "" {
		return s, nil
	}
	file := "file:" + (&url.URL{Path: path}).EscapedPath() + "?"
	if s.ckpt, err = startCheckpointer(file+q.Encode(), s.writeMu, s.log); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	q.Add("_pragma", "query_only(1)")
	if s.reads, err = sql.Open("sqlite", file+q.Encode()); err != nil {
		s.ckpt.close()
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.reads.SetMaxOpenConns(MaxReadConns)
	s.reads.SetMaxIdleConns(MaxReadConns)
	s.backlog = &backlog{dir: filepath.Join(filepath.Dir(path), backlogDirName), now: s.now, mapped: true}
	if err := s.recoverBacklogs(ctx); err != nil {
		s.ckpt.close()
		s.reads.Close()
		db.Close()
		return nil, err
	}
	return s, nil
}

func displayPath(path string) string {
	if path == "" {
		return ":memory:"
	}
	return path
}

// Now is the instant by the store's clock, the one its records are stamped with.
func (s *Store) Now() time.Time { return s.now() }

// Path is the database file's absolute path, or "" for an ephemeral store.
func (s *Store) Path() string { return s.path }

// Dir is the data directory the database file is in, or "" for an ephemeral record.
func (s *Store) Dir() string {
	if s.path == "" {
		return ""
	}
	return filepath.Dir(s.path)
}

// Close folds the backlog and closes the database. A backlog that cannot be folded
// stays on disk for the next Store to fold.
func (s *Store) Close() error {
	var foldErr error
	if s.backlog != nil {
		// Held from the last fold to the backlog's closing: no write folds after it.
		s.writeMu.lock(context.Background())
		if s.backlog.pending() {
			foldErr = s.update(context.Background(), nil, func(*Tx) error { return nil })
		}
		s.backlog.close()
		s.writeMu.unlock()
	}
	s.mu.Lock()
	for _, st := range s.stmts {
		if st != nil { // noted, not yet prepared
			st.Close()
		}
	}
	for _, st := range s.readStmts {
		st.Close()
	}
	s.stmts, s.readStmts = nil, nil
	s.mu.Unlock()
	var ckptErr error
	if s.ckpt != nil {
		ckptErr = s.ckpt.close()
	}
	if s.reads != s.db {
		s.reads.Close()
	}
	return errors.Join(foldErr, ckptErr, s.db.Close())
}

// read returns query prepared on the read connections. It prepares without s.mu held:
// for an ephemeral store, the read connection is the write connection, which a
// transaction asking stmt for a statement may hold.
func (s *Store) read(ctx context.Context, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	st, open := s.readStmts[query], s.readStmts != nil
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	if !open {
		return nil, errors.New("store: closed")
	}
	prepared, err := s.reads.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.readStmts == nil:
		prepared.Close()
		return nil, errors.New("store: closed")
	case s.readStmts[query] != nil: // another prepared it meanwhile
		prepared.Close()
		return s.readStmts[query], nil
	}
	s.readStmts[query] = prepared
	return prepared, nil
}

// readRow runs a query of one row, prepared once, on the read connections. Such a read
// is short, and a context that can be cancelled would cost goroutines to watch it, so
// ctx is looked at before the read, not during it.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil {
		return s.reads.QueryRowContext(ctx, query, args...) // which fails with ctx's error
	}
	ctx = context.WithoutCancel(ctx)
	if st, err := s.read(ctx, query); err == nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.reads.QueryRowContext(ctx, query, args...) // which fails as preparing did
}

// readRows runs a query of many rows, prepared once, on the read connections.
func (s *Store) readRows(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.read(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// writerRow runs a query of one row on the connection that writes, outside any
// transaction: prepared once the next Update has prepared what stmt noted. ctx is looked
// at before the read, as readRow looks at it.
func (s *Store) writerRow(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil {
		return s.db.QueryRowContext(ctx, query, args...) // which fails with ctx's error
	}
	ctx = context.WithoutCancel(ctx)
	if st := s.stmt(query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.db.QueryRowContext(ctx, query, args...)
}

// stmt returns query's prepared statement, or nil when it has not been prepared yet: it
// is then noted, and prepared by prepareNoted once the connection is free. (The store has
// one connection; preparing on it while a transaction holds it would wait forever.)
func (s *Store) stmt(query string) *sql.Stmt {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stmts[query]
	if !ok && s.stmts != nil {
		s.stmts[query] = nil
	}
	return st
}

// prepareNoted prepares the statements stmt has noted; parsing a statement costs more
// than running it.
func (s *Store) prepareNoted(ctx context.Context) {
	s.mu.Lock()
	var noted []string
	for q, st := range s.stmts {
		if st == nil {
			noted = append(noted, q)
		}
	}
	s.mu.Unlock()
	// Prepared without s.mu held: preparing waits for the connection, whose holder may
	// be asking stmt for a statement.
	for _, q := range noted {
		prepared, err := s.db.PrepareContext(ctx, q)
		s.mu.Lock()
		switch {
		case err != nil || s.stmts == nil:
			if s.stmts != nil {
				delete(s.stmts, q)
			}
			if prepared != nil {
				prepared.Close()
			}
		case s.stmts[q] != nil:
			prepared.Close() // another prepared it meanwhile
		default:
			s.stmts[q] = prepared
		}
		s.mu.Unlock()
	}
}

// ms is t in Unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS is Unix milliseconds as a time; 0 and null are the zero time.
func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid || v.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

// Update runs fn in one write transaction, committed if fn returns nil and rolled back
// otherwise. The transaction first folds the backlog, so that the record keeps the order
// in which this Store was told things.
func (s *Store) Update(ctx context.Context, fn func(tx *Tx) error) error {
	return s.updateEnding(ctx, nil, fn)
}

// updateEnding is Update for a transaction that records how cell x ends: should its
// start be in the backlog still, the fold records it ended (see foldStart).
func (s *Store) updateEnding(ctx context.Context, x *ending, fn func(tx *Tx) error) error {
	defer s.prepareNoted(ctx)
	// Held from the fold to its end: the next transaction must not fold the same records
	// between this one's commit and their leaving the queue.
	if err := s.writeMu.lock(ctx); err != nil {
		return fmt.Errorf("store: waiting to write: %w", err)
	}
	defer s.writeMu.unlock()
	return s.update(ctx, x, fn)
}

// update is updateEnding with s.writeMu held. The wait to begin — for another process's
// write, up to BusyTimeout — ends with ctx; a transaction that has begun runs to its end,
// ctx cancelled or not: its statements are short, and the driver watches a context that
// can be cancelled with a goroutine of its own for each statement.
func (s *Store) update(ctx context.Context, x *ending, fn func(tx *Tx) error) error {
	sqlTx, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	ctx = context.WithoutCancel(ctx)
	tx := &Tx{tx: sqlTx, s: s, ctx: ctx, now: s.now(), ending: x}
	folded := 0
	if s.backlog != nil {
		if folded, err = s.backlog.foldInto(tx); err != nil {
			sqlTx.Rollback()
			return fmt.Errorf("store: folding the backlog: %w", err)
		}
	}
	if err := fn(tx); err != nil {
		sqlTx.Rollback()
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	if n := s.commits.Add(1); s.ckpt != nil && n%CheckpointCommits == 0 {
		s.ckpt.nudge()
	}
	if folded > 0 {
		s.backlog.folded(folded)
	}
	s.watchers.committed(tx.sessions)
	return nil
}

// begin begins a write transaction, giving up once ctx is done while it waits for
// another process's write. database/sql rolls a transaction back when the context it
// began with is done, so the transaction's own context follows ctx only until it has
// begun.
func (s *Store) begin(ctx context.Context) (*sql.Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ctx.Done() == nil {
		return s.db.BeginTx(ctx, nil)
	}
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	begun := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !begun {
			cancel()
		}
	})
	sqlTx, err := s.db.BeginTx(txCtx, nil)
	stop()
	mu.Lock()
	begun = true
	mu.Unlock()
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if txCtx.Err() != nil { // ctx ended as it began: rolled back already
		sqlTx.Rollback()
		return nil, ctx.Err()
	}
	return sqlTx, nil
}

// Tx is one write transaction; its methods are the store's writes. Now is fixed for the
// whole transaction.
type Tx struct {
	tx     *sql.Tx
	s      *Store
	ctx    context.Context
	now    time.Time
	ending *ending // the cell whose end the transaction records, if it does
	// sessions are those the transaction journals records of: their readers are woken
	// once it commits.
	sessions []int64
}

// Now is the transaction's instant.
func (tx *Tx) Now() time.Time { return tx.now }

func (tx *Tx) exec(query string, args ...any) (sql.Result, error) {
	if st := tx.s.stmt(query); st != nil {
		return tx.tx.StmtContext(tx.ctx, st).ExecContext(tx.ctx, args...)
	}
	return tx.tx.ExecContext(tx.ctx, query, args...)
}

func (tx *Tx) query(query string, args ...any) (*sql.Rows, error) {
	if st := tx.s.stmt(query); st != nil {
		return tx.tx.StmtContext(tx.ctx, st).QueryContext(tx.ctx, args...)
	}
	return tx.tx.QueryContext(tx.ctx, query, args...)
}

func (tx *Tx) queryRow(query string, args ...any) *sql.Row {
	if st := tx.s.stmt(query); st != nil {
		return tx.tx.StmtContext(tx.ctx, st).QueryRowContext(tx.ctx, args...)
	}
	return tx.tx.QueryRowContext(tx.ctx, query, args...)
}

// insert runs an INSERT and returns the new row's id.
func (tx *Tx) insert(query string, args ...any) (int64, error) {
	res, err := tx.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// journal appends the record (kind, ref) of session to the journal.
func (tx *Tx) journal(session int64, kind string, ref int64) error {
	_, err := tx.exec(`INSERT INTO journal (session_id, at_ms, kind, ref_id) VALUES (?, ?, ?, ?)`,
		session, ms(tx.now), kind, ref)
	if err != nil {
		return fmt.Errorf("store: journal %s: %w", kind, err)
	}
	tx.touch(session)
	return nil
}

// Check runs PRAGMA integrity_check and PRAGMA foreign_key_check and returns an error
// describing the first problem found, or nil for a sound database.
func (s *Store) Check(ctx context.Context) error {
	var result string
	if err := s.db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&result); err != nil {
		return fmt.Errorf("store: integrity_check: %w", err)
	}
	if result != "ok" {
		return fmt.Errorf("store: integrity_check: %s", result)
	}
	rows, err := s.db.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return fmt.Errorf("store: foreign_key_check: %w", err)
	}
	defer rows.Close()
	if rows.Next() {
		var table, parent string
		var rowid, fkid sql.NullInt64
		if err := rows.Scan(&table, &rowid, &parent, &fkid); err != nil {
			return fmt.Errorf("store: foreign_key_check: %w", err)
		}
		return fmt.Errorf("store: foreign_key_check: %s row %d refers to a missing %s row", table, rowid.Int64, parent)
	}
	return rows.Err()
}
