package release

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Read reads and validates the source tree at dir.
func Read(dir string) (Snapshot, error) {
	snap, err := read(dir)
	if err != nil {
		return Snapshot{}, fmt.Errorf("release: read %s: %w", dir, err)
	}
	return snap, nil
}

// read is Read without the context on errors.
func read(dir string) (Snapshot, error) {
	info, err := os.Lstat(dir)
	if err != nil {
		return Snapshot{}, err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		return Snapshot{}, refused("", ErrSymlink)
	}
	if !info.IsDir() {
		return Snapshot{}, errors.New("not a directory")
	}
	w := walker{root: dir}
	if err := filepath.WalkDir(dir, w.visit); err != nil {
		return Snapshot{}, err
	}
	if len(w.files) == 0 {
		return Snapshot{}, refused("", ErrEmpty)
	}
	files := sortedFiles(w.files)
	return Snapshot{Files: files, ID: Identity(files)}, nil
}

// walker collects the files of the tree at root, applying the rules as it goes.
type walker struct {
	root   string
	files  []File
	budget budget
}

// visit is the filepath.WalkDirFunc of the walk.
func (w *walker) visit(p string, d fs.DirEntry, err error) error {
	if err != nil || p == w.root {
		return err
	}
	rel, err := filepath.Rel(w.root, p)
	if err != nil {
		return err
	}
	name := filepath.ToSlash(rel)
	switch typ := d.Type(); {
	case typ&fs.ModeSymlink != 0:
		return refused(name, ErrSymlink)
	case typ.IsDir():
		if skippedDir(d.Name()) {
			return fs.SkipDir
		}
		return nil
	case !typ.IsRegular():
		return refused(name, ErrSpecialFile)
	}
	return w.addFile(p, name, d)
}

// addFile checks and reads the regular file at p, named name in the snapshot.
func (w *walker) addFile(p, name string, d fs.DirEntry) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := w.budget.addFile(name); err != nil {
		return err
	}
	data, err := readRegular(p, d, w.budget.left()+1)
	if err != nil {
		return err
	}
	if err := w.budget.addBytes(name, int64(len(data))); err != nil {
		return err
	}
	w.files = append(w.files, File{Name: name, Data: data})
	return nil
}

// readRegular reads at most limit bytes of the file at p, which the walk
// found as the regular file d. It refuses to follow a symlink or block on a
// fifo, and fails if p is no longer the file the walk found, so that
// swapping a file during the walk cannot slip past the rules.
func readRegular(p string, d fs.DirEntry, limit int64) ([]byte, error) {
	walked, err := d.Info()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !opened.Mode().IsRegular() || !os.SameFile(walked, opened) {
		return nil, fmt.Errorf("%s: changed while being read", p)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}
