package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// sqliteEngine is the SQLite engine: one file (or an ephemeral database in memory) in
// WAL mode with foreign keys on and a busy timeout, so that several kiln processes may
// share it. Writes go through one connection, each an IMMEDIATE transaction; reads
// through a pool of their own, so that a read never waits behind a write. Statements are
// prepared once. No commit copies the WAL into the database file: a checkpointer on a
// connection of its own does (see checkpointer).
type sqliteEngine struct {
	db    *sql.DB // the one connection that writes
	reads *sql.DB // the connections that read; db itself for an ephemeral database
	path  string
	ckpt  *checkpointer // nil for an ephemeral or read-only database

	commits atomic.Uint64 // transactions committed, every CheckpointCommits of which nudge ckpt

	mu        sync.Mutex
	stmts     map[string]*sql.Stmt // prepared statements of db by query text
	noted     int                  // the statements of stmts noted and not yet prepared
	readStmts map[string]*sql.Stmt // prepared statements of reads by query text
}

// openSQLite opens the database file at path, creating it as needed; an empty path opens
// an ephemeral database in memory. writeMu is the Store's write lock, which the
// checkpointer holds for a pass that must catch up.
func openSQLite(path string, writeMu writeLock, opts Options) (*sqliteEngine, error) {
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
	e := newSQLite(db, path)
	if path == "" {
		return e, nil
	}
	file := "file:" + (&url.URL{Path: path}).EscapedPath() + "?"
	if e.ckpt, err = startCheckpointer(file+q.Encode(), writeMu, opts.Logger); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	q.Add("_pragma", "query_only(1)")
	if e.reads, err = sql.Open("sqlite", file+q.Encode()); err != nil {
		e.ckpt.close()
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	e.reads.SetMaxOpenConns(MaxReadConns)
	e.reads.SetMaxIdleConns(MaxReadConns)
	return e, nil
}

// openSQLiteReadOnly opens the existing database at path for reading only (SQLite's
// mode=ro, and query_only): it changes no file but the WAL's shared-memory index, which
// SQLite makes for any reader where it can. In a directory this process cannot write,
// with no WAL file (so no writer can be at work either), the file is read as immutable,
// since SQLite could not make that index.
func openSQLiteReadOnly(path string) (*sqliteEngine, error) {
	if path == "" {
		return nil, errors.New("store: a read-only record needs a file")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if _, err := os.Stat(abs); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist", ErrNoRecord, abs)
		}
		return nil, fmt.Errorf("store: %w", err)
	}
	mode := "ro"
	if _, err := os.Stat(abs + "-wal"); err != nil && unix.Access(filepath.Dir(abs), unix.W_OK) != nil {
		mode = "ro&immutable=1"
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "query_only(1)")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?mode="+mode+"&"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}
	db.SetMaxIdleConns(2)
	return newSQLite(db, abs), nil
}

// newSQLite is the engine over db, which also serves its reads until it is given others.
func newSQLite(db *sql.DB, path string) *sqliteEngine {
	return &sqliteEngine{db: db, reads: db, path: path, stmts: map[string]*sql.Stmt{}, readStmts: map[string]*sql.Stmt{}}
}

func (e *sqliteEngine) Path() string { return e.path }

func (e *sqliteEngine) Dir() string {
	if e.path == "" {
		return ""
	}
	return filepath.Dir(e.path)
}

// Close closes the prepared statements, the checkpointer and the connections.
func (e *sqliteEngine) Close() error {
	e.mu.Lock()
	for _, st := range e.stmts {
		if st != nil { // noted, not yet prepared
			st.Close()
		}
	}
	for _, st := range e.readStmts {
		st.Close()
	}
	e.stmts, e.readStmts = nil, nil
	e.mu.Unlock()
	var ckptErr error
	if e.ckpt != nil {
		ckptErr = e.ckpt.close()
	}
	if e.reads != e.db {
		e.reads.Close()
	}
	return errors.Join(ckptErr, e.db.Close())
}

// read returns query prepared on the read connections. It prepares without e.mu held:
// for an ephemeral database, the read connection is the write connection, which a
// transaction asking stmt for a statement may hold.
func (e *sqliteEngine) read(ctx context.Context, query string) (*sql.Stmt, error) {
	e.mu.Lock()
	st, open := e.readStmts[query], e.readStmts != nil
	e.mu.Unlock()
	if st != nil {
		return st, nil
	}
	if !open {
		return nil, errors.New("store: closed")
	}
	prepared, err := e.reads.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.readStmts == nil:
		prepared.Close()
		return nil, errors.New("store: closed")
	case e.readStmts[query] != nil: // another prepared it meanwhile
		prepared.Close()
		return e.readStmts[query], nil
	}
	e.readStmts[query] = prepared
	return prepared, nil
}

// QueryRow runs a query of one row, prepared once, on the read connections. Such a read
// is short, and a context that can be cancelled would cost goroutines to watch it, so
// ctx is looked at before the read, not during it.
func (e *sqliteEngine) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil {
		return e.reads.QueryRowContext(ctx, query, args...) // which fails with ctx's error
	}
	ctx = context.WithoutCancel(ctx)
	if st, err := e.read(ctx, query); err == nil {
		return st.QueryRowContext(ctx, args...)
	}
	return e.reads.QueryRowContext(ctx, query, args...) // which fails as preparing did
}

// Query runs a query of many rows, prepared once, on the read connections.
func (e *sqliteEngine) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := e.read(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// WriterRow runs a query of one row on the connection that writes, outside any
// transaction: prepared once a transaction has prepared what stmt noted. ctx is looked
// at before the read, as QueryRow looks at it.
func (e *sqliteEngine) WriterRow(ctx context.Context, query string, args ...any) *sql.Row {
	if ctx.Err() != nil {
		return e.db.QueryRowContext(ctx, query, args...) // which fails with ctx's error
	}
	ctx = context.WithoutCancel(ctx)
	if st := e.stmt(query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return e.db.QueryRowContext(ctx, query, args...)
}

// stmt returns query's prepared statement, or nil when it has not been prepared yet: it
// is then noted, and prepared by prepareNoted once the connection is free. (The engine
// has one connection that writes; preparing on it while a transaction holds it would
// wait forever.)
func (e *sqliteEngine) stmt(query string) *sql.Stmt {
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.stmts[query]
	if !ok && e.stmts != nil {
		e.stmts[query] = nil
		e.noted++
	}
	return st
}

// prepareNoted prepares the statements stmt has noted; parsing a statement costs more
// than running it.
func (e *sqliteEngine) prepareNoted(ctx context.Context) {
	e.mu.Lock()
	if e.noted == 0 {
		e.mu.Unlock()
		return
	}
	var noted []string
	for q, st := range e.stmts {
		if st == nil {
			noted = append(noted, q)
		}
	}
	e.noted = 0
	e.mu.Unlock()
	// Prepared without e.mu held: preparing waits for the connection, whose holder may
	// be asking stmt for a statement.
	for _, q := range noted {
		prepared, err := e.db.PrepareContext(ctx, q)
		e.mu.Lock()
		switch {
		case err != nil || e.stmts == nil:
			if e.stmts != nil {
				delete(e.stmts, q)
			}
			if prepared != nil {
				prepared.Close()
			}
		case e.stmts[q] != nil:
			prepared.Close() // another prepared it meanwhile
		default:
			e.stmts[q] = prepared
		}
		e.mu.Unlock()
	}
}

// Begin begins a write transaction, giving up once ctx is done while it waits for
// another process's write. database/sql rolls a transaction back when the context it
// began with is done, so the transaction's own context follows ctx only until it has
// begun. Its scope does not matter: SQLite writes one transaction at a time.
func (e *sqliteEngine) Begin(ctx context.Context, _ WriteScope) (EngineTx, error) {
	sqlTx, err := e.begin(ctx)
	if err != nil {
		return nil, err
	}
	return &sqliteTx{tx: sqlTx, e: e, ctx: context.WithoutCancel(ctx)}, nil
}

func (e *sqliteEngine) begin(ctx context.Context) (*sql.Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ctx.Done() == nil {
		return e.db.BeginTx(ctx, nil)
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
	sqlTx, err := e.db.BeginTx(txCtx, nil)
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

// Dialect is SQLite's.
func (e *sqliteEngine) Dialect() *Dialect { return &sqliteDialect }

// sqliteTx is a write transaction of the SQLite engine; its statements are prepared once
// the connection is free (see stmt).
type sqliteTx struct {
	tx  *sql.Tx
	e   *sqliteEngine
	ctx context.Context
}

func (tx *sqliteTx) Exec(query string, args ...any) (sql.Result, error) {
	if st := tx.e.stmt(query); st != nil {
		return tx.tx.StmtContext(tx.ctx, st).ExecContext(tx.ctx, args...)
	}
	return tx.tx.ExecContext(tx.ctx, query, args...)
}

func (tx *sqliteTx) Query(query string, args ...any) (*sql.Rows, error) {
	if st := tx.e.stmt(query); st != nil {
		return tx.tx.StmtContext(tx.ctx, st).QueryContext(tx.ctx, args...)
	}
	return tx.tx.QueryContext(tx.ctx, query, args...)
}

func (tx *sqliteTx) QueryRow(query string, args ...any) *sql.Row {
	if st := tx.e.stmt(query); st != nil {
		return tx.tx.StmtContext(tx.ctx, st).QueryRowContext(tx.ctx, args...)
	}
	return tx.tx.QueryRowContext(tx.ctx, query, args...)
}

func (tx *sqliteTx) Insert(query string, args ...any) (int64, error) {
	res, err := tx.Exec(query, args...)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, cmp.Or(err, sql.ErrNoRows)
	}
	return res.LastInsertId()
}

// Commit commits, nudges the checkpointer every CheckpointCommits commits, and prepares
// the statements the transaction first used, on the connection it has given back.
func (tx *sqliteTx) Commit() error {
	err := tx.tx.Commit()
	if err == nil {
		if n := tx.e.commits.Add(1); tx.e.ckpt != nil && n%CheckpointCommits == 0 {
			tx.e.ckpt.nudge()
		}
	}
	tx.e.prepareNoted(tx.ctx)
	return err
}

func (tx *sqliteTx) Rollback() error {
	err := tx.tx.Rollback()
	tx.e.prepareNoted(tx.ctx)
	return err
}

// Migrate brings the database to len(steps), a transaction a step.
func (e *sqliteEngine) Migrate(ctx context.Context, steps []string) error {
	if _, err := e.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	for {
		done, err := e.migrateOne(ctx, steps)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next migration, if any, in one transaction.
func (e *sqliteEngine) migrateOne(ctx context.Context, steps []string) (done bool, err error) {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("schema: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var version int
	switch err := tx.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&version); err {
	case nil:
	case sql.ErrNoRows:
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return false, fmt.Errorf("schema: %w", err)
		}
	default:
		return false, fmt.Errorf("schema: %w", err)
	}
	if version > len(steps) {
		return false, fmt.Errorf("%w: version %d, this kiln knows %d", ErrSchemaTooNew, version, len(steps))
	}
	if version == len(steps) {
		return true, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, steps[version]); err != nil {
		return false, fmt.Errorf("schema: migration %d: %w", version+1, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = $1`, version+1); err != nil {
		return false, fmt.Errorf("schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("schema: commit migration %d: %w", version+1, err)
	}
	return false, nil
}

// Version reports the database's schema version.
func (e *sqliteEngine) Version(ctx context.Context) (int, error) {
	var v int
	err := e.db.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	return v, err
}

// Check runs PRAGMA integrity_check and PRAGMA foreign_key_check.
func (e *sqliteEngine) Check(ctx context.Context) error {
	var result string
	if err := e.db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&result); err != nil {
		return fmt.Errorf("store: integrity_check: %w", err)
	}
	if result != "ok" {
		return fmt.Errorf("store: integrity_check: %s", result)
	}
	rows, err := e.db.QueryContext(ctx, "PRAGMA foreign_key_check")
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
