package store

import (
	"context"
	"errors"
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
	eng, err := openSQLiteReadOnly(path)
	if err != nil {
		return nil, err
	}
	s := newStore(eng, newWriteLock(), opts)
	if err := s.checkVersion(ctx); err != nil {
		eng.Close()
		return nil, err
	}
	return s, nil
}
