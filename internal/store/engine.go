package store

import (
	"context"
	"database/sql"
)

// Engine is the database a Store keeps its record in. The Store holds the record's
// meaning — which rows a record is, in which order they are written, what a commit
// wakes, the side log of answered requests — and runs its SQL through an Engine, which
// holds what a database of its kind needs: its connections, how a write transaction
// begins and waits, prepared statements, and its upkeep (SQLite's WAL checkpoints).
//
// The Store's SQL — its schema's migrations and its statements — is one description
// for every engine, in SQL every engine runs as it is, with $1, $2, … placeholders; where
// an engine's SQL differs, the engine gives its own statement (Dialect). SQLite, in this package
// (Open, OpenDir), is the embedded default; another engine is a package of its own
// whose engine passes storetest.Run, opened with New.
//
// An Engine is used by one Store, which serializes its write transactions: Begin is
// never called while a transaction of the same Store is open.
type Engine interface {
	// Begin begins a write transaction of scope. The wait to begin (for another
	// process's write) ends with ctx, returning its error; a transaction that has begun
	// runs to its end whatever ctx does.
	Begin(ctx context.Context, scope WriteScope) (EngineTx, error)
	// Dialect is the engine's statements where its database's SQL differs.
	Dialect() *Dialect
	// QueryRow and Query read outside any write transaction, on connections a write does
	// not hold up; a read sees every transaction committed before it began.
	QueryRow(ctx context.Context, query string, args ...any) *sql.Row
	Query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	// WriterRow reads one row where the Store's writes are made, outside a transaction:
	// what the Store committed last is there even where reads lag behind writes.
	WriterRow(ctx context.Context, query string, args ...any) *sql.Row
	// Migrate brings the schema to len(steps): steps[i] takes it from version i to i+1,
	// each in a transaction of its own. A database of a newer version than len(steps)
	// is ErrSchemaTooNew.
	Migrate(ctx context.Context, steps []string) error
	// Version is the schema's version.
	Version(ctx context.Context) (int, error)
	// Check checks the database's integrity and its foreign keys, and returns an error
	// describing the first problem found, or nil for a sound database.
	Check(ctx context.Context) error
	// Dir is the directory of the engine's files, where the Store keeps its side log
	// of answered requests and its locks; "" for an engine with no files of this host
	// (an ephemeral database, or a database server), whose Store records every answered
	// request in a transaction of its own.
	Dir() string
	// Path names the database, for messages: its file, or "" for an ephemeral one.
	Path() string
	// Close closes the engine; a transaction still open is rolled back.
	Close() error
}

// WriteScope is what a write transaction may change, for an engine whose processes write
// at once (a database server several daemons share): it serializes each transaction
// with those it could clash with, and no others. An engine whose writes are serialized
// anyway (SQLite) may ignore it.
type WriteScope int64

const (
	// WriteRecord may change anything: the transaction is serialized with every other.
	WriteRecord WriteScope = 0
	// WriteLeases changes the leases alone, each row of which the transaction guards
	// itself (a compare-and-swap on its token): it runs beside every transaction but a
	// WriteRecord one.
	WriteLeases WriteScope = -1
)

// WriteSession is the scope of a transaction that changes session id's records alone:
// it is serialized with the session's other writes by a lock on the session's row
// (Dialect.LockSession), and runs beside those of other sessions.
func WriteSession(id int64) WriteScope { return WriteScope(id) }

// Session is the session the scope is of, or 0 for none.
func (s WriteScope) Session() int64 { return max(int64(s), 0) }

// EngineTx is one write transaction of an Engine. Its statements run on the
// transaction's context, fixed when it began.
type EngineTx interface {
	Exec(query string, args ...any) (sql.Result, error)
	Query(query string, args ...any) (*sql.Rows, error)
	QueryRow(query string, args ...any) *sql.Row
	// Insert runs an INSERT into a table whose key is id (an INTEGER PRIMARY KEY) and
	// returns the new row's; an INSERT that inserted nothing (ON CONFLICT DO NOTHING)
	// is sql.ErrNoRows.
	Insert(query string, args ...any) (int64, error)
	// Commit commits the transaction, and Rollback undoes it; after either, the
	// transaction is over.
	Commit() error
	Rollback() error
}

// Notifier is an Engine whose record other processes write too — a database server
// several daemons share — and which tells a Store of their commits, so that its readers
// (event streams, long polls) wake for them as for its own.
type Notifier interface {
	// Notify, in a write transaction about to commit, tells the other processes' Stores
	// that it journals records of sessions, up to sequence number last; they learn of it
	// once it commits.
	Notify(tx EngineTx, sessions []int64, last int64) error
	// Listen calls changed, until ctx ends, with the sessions of each commit another
	// process notified, and with nil — any session may have changed — whenever a
	// notification may have been missed, and at a bounded interval while none comes:
	// a notification is a hint that saves latency, never the only way a change is seen.
	// It closes listening once it listens, or has failed to begin to.
	Listen(ctx context.Context, changed func(sessions []int64), listening chan<- struct{})
}
