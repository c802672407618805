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
	"strings"

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

// sessionsDir holds, under a data directory, a directory per daemon session.
const sessionsDir = "sessions"

// ErrSessionName is a session name that is not one path segment, which no session
// directory may be named.
var ErrSessionName = errors.New("kiln: a session name that is not a path segment")

// SessionDir is the directory of session sid's files under dataDir:
// <dataDir>/sessions/<sid>.
func SessionDir(dataDir, sid string) (string, error) {
	if sid == "" || sid == "." || sid == ".." || strings.ContainsAny(sid, "/\x00") {
		return "", fmt.Errorf("%w: %q", ErrSessionName, sid)
	}
	return filepath.Join(dataDir, sessionsDir, sid), nil
}

// SessionWork is session sid's working directory under dataDir:
// <dataDir>/sessions/<sid>/work.
func SessionWork(dataDir, sid string) (string, error) {
	dir, err := SessionDir(dataDir, sid)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "work"), nil
}

// MakeSessionWork makes session sid's working directory, and the directories above it
// within dataDir, each 0700 (one there already is tightened), and returns its path.
func MakeSessionWork(dataDir, sid string) (string, error) {
	work, err := SessionWork(dataDir, sid)
	if err != nil {
		return "", err
	}
	for _, dir := range []string{filepath.Join(dataDir, sessionsDir), filepath.Dir(work), work} {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("kiln: session directory: %w", err)
		}
		// A symlink planted in the data directory is not followed: the directory is
		// the data directory's own.
		info, err := os.Lstat(dir)
		if err != nil {
			return "", fmt.Errorf("kiln: session directory: %w", err)
		}
		if !info.IsDir() {
			return "", fmt.Errorf("kiln: session directory: %s is not a directory", dir)
		}
		if info.Mode().Perm() != 0o700 {
			if err := os.Chmod(dir, 0o700); err != nil {
				return "", fmt.Errorf("kiln: session directory: %w", err)
			}
		}
	}
	return work, nil
}

// RemoveSessionDir removes session sid's directory under dataDir and all it holds;
// one that is not there is no error.
func RemoveSessionDir(dataDir, sid string) error {
	dir, err := SessionDir(dataDir, sid)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("kiln: session directory: %w", err)
	}
	return nil
}
