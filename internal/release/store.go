package release

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
)

// Dir is where release id lives under the data directory: <data>/releases/<id>.
// It does not check id; see ValidID.
func Dir(dataDir, id string) string { return filepath.Join(dataDir, "releases", id) }

// Open reads the stored release id from dataDir and checks that its identity
// is id (an error if it is missing, refused by the rules, or altered). A
// missing release is an error matching fs.ErrNotExist; a refused or altered
// one is an error matching ErrCorrupt.
func Open(dataDir, id string) (Snapshot, error) {
	snap, err := open(dataDir, id)
	if err != nil {
		return Snapshot{}, fmt.Errorf("release: open %s: %w", id, err)
	}
	return snap, nil
}

// open is Open without the context on errors.
func open(dataDir, id string) (Snapshot, error) {
	if !ValidID(id) {
		return Snapshot{}, errors.New("invalid id (want 64 lowercase hex characters)")
	}
	snap, err := read(Dir(dataDir, id))
	var refusal *RefusedError
	switch {
	case errors.As(err, &refusal):
		return Snapshot{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	case err != nil:
		return Snapshot{}, err
	case snap.ID != id:
		return Snapshot{}, fmt.Errorf("%w: its content has identity %s", ErrCorrupt, snap.ID)
	}
	return snap, nil
}

// Store writes snap under dataDir as <data>/releases/<id>, atomically (write
// to a temp dir under <data>/releases, fsync files, rename into place);
// storing an id that already exists is a no-op success after verifying the
// stored tree still has that identity (if it does not, return an error
// saying the stored release is corrupt). A stored release is read-only:
// files 0444, dirs 0555. That is a first line only; what makes a release
// authoritative is its identity, which Open recomputes. Returns the directory.
//
// snap must satisfy the rules and its ID must be the identity of its files.
// Temp dirs are named ".tmp-*", so they are never valid ids; a crash can
// leave one behind.
func Store(dataDir string, snap Snapshot) (string, error) {
	dir, err := store(dataDir, snap)
	if err != nil {
		return "", fmt.Errorf("release: store %s: %w", snap.ID, err)
	}
	return dir, nil
}

// store is Store without the context on errors.
func store(dataDir string, snap Snapshot) (string, error) {
	if err := validate(snap); err != nil {
		return "", err
	}
	dir := Dir(dataDir, snap.ID)
	switch _, err := os.Lstat(dir); {
	case err == nil:
		return dir, verify(dataDir, snap.ID)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	if err := install(dataDir, snap); err != nil {
		return "", err
	}
	return dir, nil
}

// verify checks that the stored release id is intact.
func verify(dataDir, id string) error {
	_, err := open(dataDir, id)
	return err
}

// install writes snap to a temp dir and renames it into place. If another
// Store of the same id wins the rename, it verifies that one instead.
func install(dataDir string, snap Snapshot) error {
	releases := filepath.Join(dataDir, "releases")
	if err := os.MkdirAll(releases, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(releases, ".tmp-*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			RemoveAll(tmp)
		}
	}()
	if err := writeTree(tmp, snap.Files); err != nil {
		return err
	}
	dirs := treeDirs(snap.Files)
	if err := chmodDirs(tmp, dirs[1:], readOnlyDir); err != nil { // the root's turn is after the rename
		return err
	}
	dir := Dir(dataDir, snap.ID)
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Lstat(dir); statErr == nil {
			return verify(dataDir, snap.ID)
		}
		return err
	}
	renamed = true
	if err := os.Chmod(dir, readOnlyDir); err != nil {
		return err
	}
	return syncDir(releases)
}

// The modes of a stored release's files and directories.
const (
	readOnlyFile = 0o444
	readOnlyDir  = 0o555
)

// chmodDirs sets the mode of the directories dirs (slash-separated, relative to root).
func chmodDirs(root string, dirs []string, mode os.FileMode) error {
	for _, d := range dirs {
		if err := os.Chmod(filepath.Join(root, filepath.FromSlash(d)), mode); err != nil {
			return err
		}
	}
	return nil
}

// RemoveAll removes path and what it holds, as os.RemoveAll does, stored releases'
// read-only directories included.
func RemoveAll(path string) error {
	makeWritable(path)
	return os.RemoveAll(path)
}

// makeWritable gives the owner write permission on the directories under root.
func makeWritable(root string) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
}

// Extract writes the files of snap under the existing, empty directory root, read-only
// as a stored release is (RemoveAll removes it): the private copy of a checked release
// that one hooks generation loads.
func Extract(root string, snap Snapshot) error {
	if err := writeTree(root, snap.Files); err != nil {
		return fmt.Errorf("release: extract %s: %w", snap.ID, err)
	}
	if err := chmodDirs(root, treeDirs(snap.Files), readOnlyDir); err != nil {
		return fmt.Errorf("release: extract %s: %w", snap.ID, err)
	}
	return nil
}

// writeTree writes files under root, creating their directories, and
// fsyncs every file and directory written.
func writeTree(root string, files []File) error {
	dirs := treeDirs(files)
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(d)), 0o700); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(root, filepath.FromSlash(f.Name)), f.Data); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		if err := syncDir(filepath.Join(root, filepath.FromSlash(d))); err != nil {
			return err
		}
	}
	return nil
}

// treeDirs returns the directories of a tree holding files: "." for the
// root and every ancestor of each name.
func treeDirs(files []File) []string {
	dirs := map[string]bool{".": true}
	for _, f := range files {
		for d := path.Dir(f.Name); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	return slices.Sorted(maps.Keys(dirs))
}

// writeFile creates the file p, read-only, with data, and fsyncs it.
func writeFile(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, readOnlyFile)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

// syncDir fsyncs the directory p, making its entries durable.
func syncDir(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	return err
}
