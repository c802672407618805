package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenDirKeepsTheRecordToItsOwner checks the data directory's mode at its bound
// (0700, kept) and one past (0701, tightened), a looser record's files tightened, and a
// loose directory another user owns refused.
func TestOpenDirKeepsTheRecordToItsOwner(t *testing.T) {
	for _, mode := range []os.FileMode{0o700, 0o701, 0o755} {
		dir := filepath.Join(t.TempDir(), "data")
		os.Mkdir(dir, mode)
		os.Chmod(dir, mode)
		os.WriteFile(filepath.Join(dir, FileName+"-wal"), nil, 0o644)
		s, err := OpenDir(context.Background(), dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if fi, _ := os.Stat(dir); fi.Mode().Perm() != DirMode {
			t.Errorf("a %04o directory is %04o after opening; want %04o", mode, fi.Mode().Perm(), DirMode)
		}
		for _, name := range []string{FileName, FileName + "-wal"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().Perm() != FileMode {
				t.Errorf("%s is %04o; want %04o", name, fi.Mode().Perm(), FileMode)
			}
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("making a directory another user owns needs root")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o755)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(context.Background(), dir, Options{}); !errors.Is(err, ErrLooseDir) {
		t.Errorf("OpenDir of another user's 0755 directory: %v; want ErrLooseDir", err)
	}
}
