package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// Modes of the data directory and of the files kiln makes in it: its owner's alone.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// ErrLooseDir is a data directory that others may read or enter, which kiln cannot
// tighten because it is not its user's.
var ErrLooseDir = errors.New("store: the data directory is open to others")

// secureDir makes dir DirMode when it is looser and this process's user owns it; one
// it does not own is refused with ErrLooseDir.
func secureDir(dir string, log *slog.Logger) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("store: data directory: %w", err)
	}
	if fi.Mode().Perm()&^DirMode == 0 {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is mode %04o and not owned by this user, so kiln will not tighten it; make it %04o or use another --data",
			ErrLooseDir, dir, fi.Mode().Perm(), DirMode)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("store: tightening the data directory: %w", err)
	}
	log.Warn("the data directory was open to others; it is now the owner's alone", "dir", dir,
		"was", fmt.Sprintf("%04o", fi.Mode().Perm()), "now", fmt.Sprintf("%04o", DirMode))
	return nil
}

// secureFiles makes the record's files in dir FileMode where they are looser: the
// database, and its write-ahead log and shared memory, which SQLite makes with the
// database's mode.
func secureFiles(dir string) error {
	for _, name := range []string{FileName, FileName + "-wal", FileName + "-shm"} {
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if fi.Mode().Perm()&^FileMode != 0 {
			if err := os.Chmod(path, FileMode); err != nil {
				return fmt.Errorf("store: tightening %s: %w", name, err)
			}
		}
	}
	return nil
}
