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
//
// The Store runs its SQL through an Engine (engine.go): SQLite (sqlite.go), the
// default, or PostgreSQL (package postgres); the package storetest is the suite every
// engine passes.
package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
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
	// Lease are the terms of the leases the Store takes; the zero terms hold a lease
	// while its process lives.
	Lease LeaseTerms
}

// Store is an open durable record. It is safe for concurrent use; writes are serialized.
type Store struct {
	eng     Engine
	backlog *backlog // nil for an engine with no files of this host
	log     *slog.Logger
	now     func() time.Time

	writeMu writeLock // held by each Update

	mu      sync.Mutex
	pending map[[2]int64]pendingView
	waiting map[int64]bool // sessions with a wait this Store recorded that may be open

	migratedFrom int // the schema's version as the Store opened, before migrating

	commits  atomic.Uint64 // transactions this Store has committed
	watchers watchers      // the readers a commit wakes (see Watch)

	lease      LeaseTerms
	owner      string                 // the Store's own name in the leases it holds
	advertised atomic.Pointer[string] // the URL AdvertiseURL set, over lease.URL
	held       map[string]string      // under mu: the token of each lease held under a TTL, by key
	stop       chan struct{}          // closed as the Store closes: ends its goroutines
	stopOnce   sync.Once
	running    sync.WaitGroup // the Store's goroutines: lease renewal, listening for changes
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
	writeMu := newWriteLock()
	eng, err := openSQLite(path, writeMu, opts)
	if err != nil {
		return nil, err
	}
	return open(ctx, eng, writeMu, opts)
}

// New opens a Store on eng, an engine of another kind than the SQLite of Open: it
// migrates eng's schema, and recovers the side log in eng.Dir, if it has one; with
// opts.ReadOnly it only checks that the schema is this kiln's, for a Store that is only
// read. The Store closes eng as it closes.
func New(ctx context.Context, eng Engine, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return open(ctx, eng, newWriteLock(), opts)
}

// open is a Store on eng, with writeMu its write lock, migrated, its backlog recovered.
func open(ctx context.Context, eng Engine, writeMu writeLock, opts Options) (*Store, error) {
	s := newStore(eng, writeMu, opts)
	if opts.ReadOnly {
		if err := s.checkVersion(ctx); err != nil {
			eng.Close()
			return nil, err
		}
		s.start()
		return s, nil
	}
	// The version before: 0 for a database no kiln has made, whose engine may fail to
	// say, having no table to say it from.
	s.migratedFrom, _ = eng.Version(ctx)
	if err := eng.Migrate(ctx, migrations(eng.Dialect())); err != nil {
		eng.Close()
		return nil, fmt.Errorf("store: %s: %w", displayPath(eng.Path()), err)
	}
	if err := s.checkClock(ctx); err != nil {
		eng.Close()
		return nil, err
	}
	if eng.Dir() != "" {
		s.backlog = &backlog{dir: filepath.Join(eng.Dir(), backlogDirName), now: s.now}
		if err := s.recoverBacklogs(ctx); err != nil {
			eng.Close()
			return nil, err
		}
	}
	s.start()
	return s, nil
}

// newStore is a Store over eng, with writeMu its write lock, as yet unmigrated.
func newStore(eng Engine, writeMu writeLock, opts Options) *Store {
	var owner [16]byte
	rand.Read(owner[:])
	return &Store{eng: eng, log: opts.Logger, now: opts.Now, writeMu: writeMu,
		pending: map[[2]int64]pendingView{}, waiting: map[int64]bool{},
		lease: opts.Lease, owner: hex.EncodeToString(owner[:]), held: map[string]string{}, stop: make(chan struct{})}
}

// start starts the Store's goroutines: the renewal of its leases under a TTL, and the
// listening for other processes' commits where the engine tells of them.
func (s *Store) start() {
	if s.lease.TTL > 0 {
		s.running.Go(func() { s.renew(s.stop) })
	}
	if n, ok := s.eng.(Notifier); ok {
		ctx, cancel := context.WithCancel(context.Background())
		listening := make(chan struct{})
		s.running.Go(func() { n.Listen(ctx, s.watchers.changed, listening) })
		s.running.Go(func() {
			<-s.stop
			cancel()
		})
		<-listening // a reader's wait from here on is woken by other processes' commits
	}
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
func (s *Store) Path() string { return s.eng.Path() }

// Dir is the data directory the database file is in, or "" for an ephemeral record.
func (s *Store) Dir() string { return s.eng.Dir() }

// Close folds the backlog and closes the database. A backlog that cannot be folded
// stays on disk for the next Store to fold.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	s.running.Wait()
	var foldErr error
	if s.backlog != nil {
		// Held from the last fold to the backlog's closing: no write folds after it.
		s.writeMu.lock(context.Background())
		if s.backlog.pending() {
			foldErr = s.update(context.Background(), WriteRecord, nil, func(*Tx) error { return nil })
		}
		s.backlog.close()
		s.writeMu.unlock()
	}
	return errors.Join(foldErr, s.eng.Close())
}

// readRow runs a query of one row on the engine's read connections.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	return s.eng.QueryRow(ctx, query, args...)
}

// readRows runs a query of many rows on the engine's read connections.
func (s *Store) readRows(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return s.eng.Query(ctx, query, args...)
}

// writerRow runs a query of one row where the writes are made, outside a transaction.
func (s *Store) writerRow(ctx context.Context, query string, args ...any) *sql.Row {
	return s.eng.WriterRow(ctx, query, args...)
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
	return s.updateScoped(ctx, WriteRecord, nil, fn)
}

// UpdateSession is Update for a transaction that changes session's records alone (and
// reads what it likes): where several processes write the record, it is serialized
// with the session's other writes only, not with every write (see WriteScope).
func (s *Store) UpdateSession(ctx context.Context, session int64, fn func(tx *Tx) error) error {
	return s.updateScoped(ctx, WriteSession(session), nil, fn)
}

// updateScoped is Update for a transaction of scope; x, if not nil, is the cell whose
// end it records: should its start be in the backlog still, the fold records it ended
// (see foldStart).
func (s *Store) updateScoped(ctx context.Context, scope WriteScope, x *ending, fn func(tx *Tx) error) error {
	// Held from the fold to its end: the next transaction must not fold the same records
	// between this one's commit and their leaving the queue.
	if err := s.writeMu.lock(ctx); err != nil {
		return fmt.Errorf("store: waiting to write: %w", err)
	}
	defer s.writeMu.unlock()
	return s.update(ctx, scope, x, fn)
}

// update is updateScoped with s.writeMu held. The wait to begin — for another process's
// write, up to BusyTimeout — ends with ctx; a transaction that has begun runs to its end,
// ctx cancelled or not: its statements are short, and the driver watches a context that
// can be cancelled with a goroutine of its own for each statement.
func (s *Store) update(ctx context.Context, scope WriteScope, x *ending, fn func(tx *Tx) error) error {
	etx, err := s.eng.Begin(ctx, scope)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	tx := &Tx{tx: etx, s: s, now: s.now(), ending: x, scope: scope}
	folded := 0
	if s.backlog != nil {
		if folded, err = s.backlog.foldInto(tx); err != nil {
			etx.Rollback()
			return fmt.Errorf("store: folding the backlog: %w", err)
		}
	}
	if err := fn(tx); err != nil {
		etx.Rollback()
		return err
	}
	last, err := tx.appendJournal()
	if err != nil {
		etx.Rollback()
		return err
	}
	if n, ok := s.eng.(Notifier); ok && len(tx.sessions) > 0 {
		if err := n.Notify(etx, tx.sessions, last); err != nil {
			etx.Rollback()
			return fmt.Errorf("store: notifying the commit: %w", err)
		}
	}
	if err := etx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	s.commits.Add(1)
	if folded > 0 {
		s.backlog.folded(folded)
	}
	s.watchers.committed(tx.sessions)
	return nil
}

// Tx is one write transaction; its methods are the store's writes. Now is fixed for the
// whole transaction.
type Tx struct {
	tx     EngineTx
	s      *Store
	now    time.Time
	ending *ending // the cell whose end the transaction records, if it does
	// sessions are those the transaction journals records of: their readers are woken
	// once it commits.
	sessions []int64
	scope    WriteScope
	// locked are the sessions other than the scope's whose rows the transaction locked
	// to journal them.
	locked []int64
	// entries are the journal's entries of the transaction, appended as it commits.
	entries []journalEntry
}

// journalEntry is one entry of the journal: record ref, of kind, of a session.
type journalEntry struct {
	session int64
	kind    string
	ref     int64
}

// Now is the transaction's instant.
func (tx *Tx) Now() time.Time { return tx.now }

func (tx *Tx) exec(query string, args ...any) (sql.Result, error) { return tx.tx.Exec(query, args...) }

func (tx *Tx) query(query string, args ...any) (*sql.Rows, error) { return tx.tx.Query(query, args...) }

func (tx *Tx) queryRow(query string, args ...any) *sql.Row { return tx.tx.QueryRow(query, args...) }

// insert runs an INSERT and returns the new row's id.
func (tx *Tx) insert(query string, args ...any) (int64, error) { return tx.tx.Insert(query, args...) }

// journal appends the record (kind, ref) of session to the journal, as the transaction
// commits. A transaction scoped to another session first locks session's row too.
func (tx *Tx) journal(session int64, kind string, ref int64) error {
	if err := tx.lockSession(session); err != nil {
		return fmt.Errorf("store: journal %s: %w", kind, err)
	}
	tx.entries = append(tx.entries, journalEntry{session: session, kind: kind, ref: ref})
	tx.touch(session)
	return nil
}

// lockSession locks session's row for a transaction whose scope is not the whole record
// and does not hold it yet, where the engine has writers at once.
func (tx *Tx) lockSession(session int64) error {
	lock := tx.s.eng.Dialect().LockSession
	if tx.scope == WriteRecord || tx.scope.Session() == session || lock == "" || slices.Contains(tx.locked, session) {
		return nil
	}
	if _, err := tx.exec(lock, session); err != nil {
		return err
	}
	tx.locked = append(tx.locked, session)
	return nil
}

// appendJournal inserts the transaction's journal entries, in order, as it is about to
// commit, by the engine's AppendJournal: their sequence numbers follow those of every
// transaction that committed before, and precede those of every one after. It returns
// the last entry's sequence number, 0 for none.
func (tx *Tx) appendJournal() (last int64, err error) {
	if len(tx.entries) == 0 {
		return 0, nil
	}
	list := make([]byte, 0, 40*len(tx.entries))
	list = append(list, '[')
	for i, e := range tx.entries {
		if i > 0 {
			list = append(list, ',')
		}
		list = append(list, '[')
		list = strconv.AppendInt(list, e.session, 10)
		list = append(list, ',')
		list = strconv.AppendQuoteToASCII(list, e.kind) // a kind is a plain word: its JSON too
		list = append(list, ',')
		list = strconv.AppendInt(list, e.ref, 10)
		list = append(list, ']')
	}
	list = append(list, ']')
	rows, err := tx.query(tx.s.eng.Dialect().AppendJournal, string(list), ms(tx.now))
	for err == nil && rows.Next() {
		var seq int64
		err = rows.Scan(&seq)
		last = max(last, seq)
	}
	if rows != nil {
		err = errors.Join(err, rows.Err(), rows.Close())
	}
	if err != nil {
		return 0, fmt.Errorf("store: journal: %w", err)
	}
	return last, nil
}

// Check checks the database's integrity and its foreign keys (for SQLite, PRAGMA
// integrity_check and foreign_key_check), and returns an error describing the first
// problem found, or nil for a sound database.
func (s *Store) Check(ctx context.Context) error { return s.eng.Check(ctx) }
