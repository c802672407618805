// Package postgres is the store's PostgreSQL engine: kiln's record in a database of a
// PostgreSQL server, which several daemons, on one host or many, may share.
//
// It runs the store's SQL as the store writes it, in SQL both engines take, and its
// own statements where PostgreSQL's SQL differs (dialect.go). Writes go through a pool
// of their own, reads through another, so that a read never waits behind a write. Each
// write transaction locks what its scope says (see begin): the whole record, or one
// session's row, so that sessions' writes run side by side on any number of daemons;
// and it numbers its journal entries under a lock held to its commit
// (JournalLockKey), so that the journal's order is its commit order.
//
// The engine keeps no file of this host: a Store on it records every answered request
// in a transaction of its own, having no side log to put it in.
//
// The URL is a libpq one (postgres://user@host/db?sslmode=…, or host=/run/postgresql
// for a Unix socket). Its password, if any, is taken from PGPASSWORD or ~/.pgpass as
// libpq takes it; OpenStore refuses a URL that carries one, which would be written to a
// file or shown in a process list.
package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kilnrt/kiln/internal/store"
)

// WriteLockKey is the advisory lock every write transaction of the engine holds, for
// every Store of every process on the database ("kiln" in ASCII): exclusively for a
// transaction of the whole record, shared for one of a session or of the leases.
const WriteLockKey = 0x6b696c6e

// MaxWriteConns are the write pool's connections: one for a Store's transaction, one
// for what reads where the writes are made meanwhile.
const MaxWriteConns = 2

// IdleInTransactionTimeout is how long the server lets a transaction of the engine sit
// idle before it ends it (idle_in_transaction_session_timeout, unless the URL sets it):
// a daemon paused or cut off inside a write transaction holds WriteLockKey, and with it
// every daemon's writes, no longer than this. kiln's transactions run their statements
// back to back.
const IdleInTransactionTimeout = 30 * time.Second

// idleInTx is the server's setting of IdleInTransactionTimeout.
const idleInTx = "idle_in_transaction_session_timeout"

// ErrCommitRolledBack is a commit of a transaction a failed statement had aborted: the
// server rolled it back.
var ErrCommitRolledBack = errors.New("postgres: the transaction was rolled back at its commit: a statement in it had failed")

// ErrPasswordInURL is a store URL that carries a password.
var ErrPasswordInURL = errors.New("postgres: the store URL carries a password; give it in PGPASSWORD (or ~/.pgpass) instead")

// IsURL reports whether store names a PostgreSQL database rather than a directory.
func IsURL(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// CheckURL refuses a store URL kiln does not open: not a postgres:// one, or one with a
// password in it (ErrPasswordInURL).
func CheckURL(rawURL string) error {
	if !IsURL(rawURL) {
		return fmt.Errorf("postgres: store %q is not a postgres:// URL", Redact(rawURL))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("postgres: store URL: %w", err)
	}
	if _, set := u.User.Password(); set || u.Query().Has("password") {
		return ErrPasswordInURL
	}
	return nil
}

// Redact is rawURL with any password in it replaced, for messages.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "postgres://…"
	}
	if _, set := u.User.Password(); set {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// OpenStore opens the record in the database rawURL names: the engine, under a Store
// that migrates its schema as it opens.
func OpenStore(ctx context.Context, rawURL string, opts store.Options) (*store.Store, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	eng, err := Open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	eng.logger = opts.Logger
	return store.New(ctx, eng, opts)
}

// Engine is the PostgreSQL engine of a Store.
type Engine struct {
	db     *sql.DB // writes, and reads where they are made
	reads  *sql.DB
	id     string          // the engine's own, in its notifications
	name   string          // the URL without its password
	cfg    *pgx.ConnConfig // for the connection that listens for other daemons' commits
	logger *slog.Logger
}

// Open connects to the database rawURL names, and makes sure it answers.
func Open(ctx context.Context, rawURL string) (*Engine, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", Redact(rawURL), err)
	}
	if _, set := cfg.RuntimeParams[idleInTx]; !set {
		cfg.RuntimeParams[idleInTx] = strconv.FormatInt(IdleInTransactionTimeout.Milliseconds(), 10)
	}
	var id [8]byte
	rand.Read(id[:])
	e := &Engine{db: stdlib.OpenDB(*cfg), reads: stdlib.OpenDB(*cfg), id: hex.EncodeToString(id[:]), name: Redact(rawURL), cfg: cfg}
	e.db.SetMaxOpenConns(MaxWriteConns)
	e.db.SetMaxIdleConns(MaxWriteConns)
	e.reads.SetMaxOpenConns(store.MaxReadConns)
	e.reads.SetMaxIdleConns(store.MaxReadConns)
	if err := e.db.PingContext(ctx); err != nil {
		e.Close()
		return nil, fmt.Errorf("postgres: %s: %w", e.name, err)
	}
	return e, nil
}

// Path names the database, without its password.
func (e *Engine) Path() string { return e.name }

// Dir is "": the engine keeps no file of this host.
func (e *Engine) Dir() string { return "" }

// Close closes the connections.
func (e *Engine) Close() error { return errors.Join(e.reads.Close(), e.db.Close()) }

// QueryRow reads one row on the read connections.
func (e *Engine) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return e.reads.QueryRowContext(ctx, query, values(args)...)
}

// Query reads rows on the read connections.
func (e *Engine) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return e.reads.QueryContext(ctx, query, values(args)...)
}

// WriterRow reads one row on the write connections, outside a transaction.
func (e *Engine) WriterRow(ctx context.Context, query string, args ...any) *sql.Row {
	return e.db.QueryRowContext(ctx, query, values(args)...)
}

// values are args as PostgreSQL takes them: SQLite stores a bool in an INTEGER column
// as 0 or 1, which the store's schema declares it to be; and a PostgreSQL text cannot
// hold the character NUL, which SQLite's can: it is recorded as U+FFFD, as the store
// records a byte that is not UTF-8.
func values(args []any) []any {
	copied := false
	for i, a := range args {
		var v any
		switch a := a.(type) {
		case bool:
			v = int64(0)
			if a {
				v = int64(1)
			}
		case string:
			if strings.IndexByte(a, 0) < 0 {
				continue
			}
			v = strings.ReplaceAll(a, "\x00", "\uFFFD")
		default:
			continue
		}
		if !copied {
			args, copied = slices.Clone(args), true
		}
		args[i] = v
	}
	return args
}

// begin begins a transaction of scope and takes its locks, in one round trip:
//   - WriteRecord: WriteLockKey, exclusively: the transaction runs alone;
//   - WriteLeases: WriteLockKey, shared: beside every transaction but WriteRecord ones;
//   - a session's: WriteLockKey, shared, and the session's row (FOR NO KEY UPDATE, which
//     the foreign keys of rows inserted meanwhile do not wait for): beside the
//     transactions of other sessions.
func begin(scope store.WriteScope) string {
	switch {
	case scope == store.WriteRecord:
		return fmt.Sprintf(`BEGIN; SELECT pg_advisory_xact_lock(%d)`, WriteLockKey)
	case scope.Session() == 0:
		return fmt.Sprintf(`BEGIN; SELECT pg_advisory_xact_lock_shared(%d)`, WriteLockKey)
	}
	return fmt.Sprintf(`BEGIN; SELECT pg_advisory_xact_lock_shared(%d); SELECT 1 FROM sessions WHERE id = %d FOR NO KEY UPDATE`,
		WriteLockKey, scope.Session())
}

// Begin begins a write transaction of scope and takes its locks (see begin), on a
// connection of the write pool held until the transaction ends; the wait for them,
// while another process writes, ends with ctx.
func (e *Engine) Begin(ctx context.Context, scope store.WriteScope) (store.EngineTx, error) {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, begin(scope)); err != nil {
		conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`) // a connection the wait broke is discarded
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return &engineTx{conn: conn, e: e, ctx: context.WithoutCancel(ctx)}, nil
}

// engineTx is a write transaction of the engine. Its statements run on a context that
// cannot be cancelled: a transaction that has begun runs to its end.
type engineTx struct {
	conn *sql.Conn
	e    *Engine
	ctx  context.Context
	// notify is the payload of the notification the commit sends, "" for none: digits,
	// hexadecimal, ';' and ',' (see Notify).
	notify string
}

func (tx *engineTx) Exec(query string, args ...any) (sql.Result, error) {
	return tx.conn.ExecContext(tx.ctx, query, values(args)...)
}

func (tx *engineTx) Query(query string, args ...any) (*sql.Rows, error) {
	return tx.conn.QueryContext(tx.ctx, query, values(args)...)
}

func (tx *engineTx) QueryRow(query string, args ...any) *sql.Row {
	return tx.conn.QueryRowContext(tx.ctx, query, values(args)...)
}

// Insert runs an INSERT into a table whose key is id, and returns the new row's.
func (tx *engineTx) Insert(query string, args ...any) (int64, error) {
	var id int64
	err := tx.QueryRow(query+" RETURNING id", args...).Scan(&id)
	return id, err
}

// Commit commits; a transaction a failed statement aborted is rolled back by the
// server instead, and that is ErrCommitRolledBack.
//
// The notification Notify made ready goes with the COMMIT, in one round trip. Should it
// fail (the transaction had been aborted), the COMMIT does not run: the transaction is
// rolled back, and that is ErrCommitRolledBack too.
func (tx *engineTx) Commit() error {
	defer tx.conn.Close()
	commit := `COMMIT`
	if tx.notify != "" {
		commit = `SELECT pg_notify('` + Channel + `', '` + strings.ReplaceAll(tx.notify, "'", "''") + `'); COMMIT`
	}
	return tx.conn.Raw(func(dc any) error {
		conn := dc.(*stdlib.Conn).Conn()
		tag, err := conn.Exec(tx.ctx, commit)
		switch {
		case err != nil && tx.notify != "" && conn.PgConn().TxStatus() == 'E':
			_, rerr := conn.Exec(tx.ctx, `ROLLBACK`)
			return errors.Join(ErrCommitRolledBack, err, rerr)
		case err == nil && tag.String() != "COMMIT":
			return ErrCommitRolledBack
		}
		return err
	})
}

func (tx *engineTx) Rollback() error {
	defer tx.conn.Close()
	_, err := tx.conn.ExecContext(tx.ctx, `ROLLBACK`)
	return err
}
