package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadOnlyOpensWithoutWriting checks that a read-only Store reads what a writer
// recorded, changes no file of the directory but SQLite's own WAL files, and refuses
// writes.
func TestReadOnlyOpensWithoutWriting(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenDir(t.Context(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.EnsureSession(t.Context(), "s"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	before := listing(t, dir)
	r, err := OpenDir(t.Context(), dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.SessionByName(t.Context(), "s"); err != nil {
		t.Errorf("reading a session: %v", err)
	}
	if _, err := r.Log(t.Context(), LogFilter{}); err != nil {
		t.Errorf("reading the log: %v", err)
	}
	if _, _, err := r.EnsureSession(t.Context(), "t"); err == nil {
		t.Error("a read-only Store created a session")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if after := listing(t, dir); !slices.Equal(before, after) {
		t.Errorf("the directory changed: %q, then %q", before, after)
	}
}

// TestReadOnlyCreatesNothing checks that a read-only open of a directory without a
// record fails with ErrNoRecord and creates neither the directory nor a database.
func TestReadOnlyCreatesNothing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "typo")
	if _, err := OpenDir(t.Context(), missing, Options{ReadOnly: true}); !errors.Is(err, ErrNoRecord) {
		t.Errorf("got %v; want ErrNoRecord", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory was made: %v", err)
	}
	empty := t.TempDir()
	if _, err := OpenDir(t.Context(), empty, Options{ReadOnly: true}); !errors.Is(err, ErrNoRecord) {
		t.Errorf("got %v; want ErrNoRecord", err)
	}
	if names := listing(t, empty); len(names) != 0 {
		t.Errorf("files made: %q", names)
	}
}

// listing is every file under dir with its size and modification time, but the WAL
// files any SQLite reader may make.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if path != dir && !strings.HasSuffix(path, "-wal") && !strings.HasSuffix(path, "-shm") {
			out = append(out, fmt.Sprintf("%s %s %d", path, info.ModTime(), info.Size()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
