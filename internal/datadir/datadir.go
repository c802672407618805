// Package datadir finds and opens the durable record of a data directory for the
// public packages that work on one without a workbench: reading the journal, and what
// an operator does to a directory (releases, hooks, skills, inputs).
package datadir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kilnrt/kiln/internal/store"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrNoRecord is a data directory that holds no durable record yet, asked of by a
	// reader, which never makes one.
	ErrNoRecord = errors.New("kiln: no durable record")
	// ErrNoSession is a session the record does not have, asked of by a reader.
	ErrNoSession = errors.New("kiln: not found")
)

// OrDefault is dataDir, or the default data directory when it is "".
func OrDefault(dataDir string) (string, error) {
	if dataDir != "" {
		return dataDir, nil
	}
	return store.DefaultDir(os.Getenv)
}

// OpenExisting opens the durable record of dataDir, which must already exist; readOnly
// opens it for reading only, which needs no write access.
func OpenExisting(ctx context.Context, dataDir string, readOnly bool) (*store.Store, error) {
	if !HasRecord(dataDir) {
		return nil, fmt.Errorf("%w in %s (kiln init makes one, as kiln exec does)", ErrNoRecord, dataDir)
	}
	return store.OpenDir(ctx, dataDir, store.Options{ReadOnly: readOnly})
}

// HasRecord says whether dataDir holds a durable record.
func HasRecord(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, store.FileName))
	return !errors.Is(err, fs.ErrNotExist)
}

// Session is the stored session named name, or ErrNoSession saying which and where.
func Session(ctx context.Context, st *store.Store, name string) (store.Session, error) {
	s, err := st.SessionByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return s, fmt.Errorf("%w: session %q in %s", ErrNoSession, name, st.Path())
	}
	return s, err
}
