package main

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// A workDir is the working directory the kiln namespace is confined to. Paths are
// resolved by the kernel, beneath the directory (openat2 with RESOLVE_BENEATH): a
// symbolic link is followed as Linux follows one, up to its 40 links in a chain, and
// one that leads out, or an absolute one, is refused. Where the kernel has no openat2
// (before Linux 5.6), os.Root resolves them instead, following at most 8 links.
type workDir struct {
	dir  *os.File // for openat2
	root *os.Root // where openat2 is missing
}

// openWorkDir opens the directory path as a workDir.
func openWorkDir(path string) (*workDir, error) {
	dir, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		dir.Close()
		return nil, err
	}
	return &workDir{dir: dir, root: root}, nil
}

// Close closes w.
func (w *workDir) Close() error {
	return errors.Join(w.dir.Close(), w.root.Close())
}

// open opens path, beneath w, read-only, without blocking and without making a
// terminal its controlling one.
func (w *workDir) open(path string) (*os.File, error) {
	const flags = os.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	fd, err := unix.Openat2(int(w.dir.Fd()), path, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), path), nil
	case errors.Is(err, unix.ENOSYS):
		return w.root.OpenFile(path, flags, 0)
	case errors.Is(err, unix.EXDEV):
		return nil, &os.PathError{Op: "open", Path: path, Err: errEscapes}
	}
	return nil, &os.PathError{Op: "open", Path: path, Err: err}
}

// errEscapes is a path that leads out of the working directory.
var errEscapes = errors.New("path escapes from parent")

// entrySize is the size of the entry name of the open directory dir, found through dir
// itself, not through a path: 0 if it cannot be had.
func entrySize(dir *os.File, name string) int64 {
	var st unix.Stat_t
	if unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return 0
	}
	return st.Size
}
