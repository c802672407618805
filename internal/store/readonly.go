package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrNoRecord is a read-only open of a database that does not exist.
var ErrNoRecord = errors.New("store: no durable record")

// openReadOnly opens the existing database at path for reading only (SQLite's mode=ro,
// and query_only): it applies no migration, folds no backlog, and changes no file but
// the WAL's shared-memory index, which SQLite makes for any reader where it can. In a
// directory this process cannot write, with no WAL file (so no writer can be at work
// either), the file is read as immutable, since SQLite could not make that index. A database of another schema version than this kiln's is
// refused. The backlogs of other hosts are not read: what a dead host answered and did
// not fold shows once a writing Store opens the directory.
func openReadOnly(ctx context.Context, path string, opts Options) (*Store, error) {
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
	s := newStore(db, abs, opts)
	v, err := s.Version(ctx)
	switch {
	case err != nil:
		err = fmt.Errorf("store: %s: %w", abs, err)
	case v > SchemaVersion:
		err = fmt.Errorf("%w: %s has version %d, this kiln knows %d", ErrSchemaTooNew, abs, v, SchemaVersion)
	case v < SchemaVersion:
		err = fmt.Errorf("store: %s has schema version %d, this kiln reads %d: a command that writes (kiln init) migrates it", abs, v, SchemaVersion)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// newStore is a Store over db, which also serves its reads until Open gives it others.
func newStore(db *sql.DB, path string, opts Options) *Store {
	return &Store{db: db, reads: db, path: path, log: opts.Logger, now: opts.Now,
		writeMu: newWriteLock(),
		stmts:   map[string]*sql.Stmt{}, readStmts: map[string]*sql.Stmt{}, pending: map[[2]int64]pendingView{},
		waiting: map[int64]bool{}}
}
