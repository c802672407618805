package release

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kilnrt/kiln/internal/regfile"
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
	data, err := readRegular(p, d, w.budget.left())
	if errors.Is(err, regfile.ErrTooLarge) {
		return refused(name, ErrTooLarge)
	}
	if err != nil {
		return err
	}
	if err := w.budget.addBytes(name, int64(len(data))); err != nil {
		return err
	}
	w.files = append(w.files, File{Name: name, Data: data})
	return nil
}

// readRegular reads the file at p, which the walk found as the regular file d, if it
// holds at most limit bytes. It refuses to follow a symlink or block on a fifo, and
// fails if p is no longer the file the walk found, so that swapping a file during the
// walk cannot slip past the rules.
func readRegular(p string, d fs.DirEntry, limit int64) ([]byte, error) {
	walked, err := d.Info()
	if err != nil {
		return nil, err
	}
	f, err := regfile.Open(p, true)
	if errors.Is(err, regfile.ErrNotRegular) || errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s: changed while being read", p)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !os.SameFile(walked, f.Info) {
		return nil, fmt.Errorf("%s: changed while being read", p)
	}
	return f.ReadAll(limit)
}
