package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/regfile"
)

// MaxFileBytes bounds a file read or written through a session: 16 MiB.
const MaxFileBytes = 16 << 20

// Errors of the files a session reads and writes.
var (
	ErrNoFile      = errors.New("serve: no such file")
	ErrFileRefused = errors.New("serve: file refused")
	ErrFileTooBig  = fmt.Errorf("serve: file larger than %d bytes", MaxFileBytes)
)

// root opens the session's directory as a root that confines every path within it.
func (s *Session) root(ctx context.Context) (*os.Root, error) {
	if err := s.writable(); err != nil { // its files are on the holder's host
		return nil, err
	}
	s.mu.Lock()
	dir := s.st.Dir
	s.mu.Unlock()
	if dir == "" { // its runtime has not started yet: starting it says where it runs
		if _, err := s.runtime(ctx); err != nil {
			return nil, err
		}
		s.mu.Lock()
		dir = s.st.Dir
		s.mu.Unlock()
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("serve: session %s directory: %w", s.id, err)
	}
	return root, nil
}

// cleanPath checks a path a client names within the session's directory.
func cleanPath(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: %q is not a relative path", ErrFileRefused, name)
	}
	return path.Clean(name), nil
}

// fileError says what an os.Root refusal of name is.
func fileError(name string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNoFile, name)
	}
	return fmt.Errorf("%w: %s: %w", ErrFileRefused, name, errors.Unwrap(err))
}

// ReadFile opens the regular file name within the session's directory: no path out
// of it, through .. or a symlink, and at most MaxFileBytes. The caller closes it.
func (s *Session) ReadFile(ctx context.Context, name string) (*os.File, int64, error) {
	name, err := cleanPath(name)
	if err != nil {
		return nil, 0, err
	}
	root, err := s.root(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer root.Close()
	f, err := regfile.OpenIn(root, name)
	switch {
	case errors.Is(err, regfile.ErrNotRegular):
		return nil, 0, fmt.Errorf("%w: %s is not a regular file", ErrFileRefused, name)
	case err != nil:
		return nil, 0, fileError(name, err)
	case f.Info.Size() > MaxFileBytes:
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s has %d bytes", ErrFileTooBig, name, f.Info.Size())
	}
	return f.File, f.Info.Size(), nil
}

// StaleTemp is how old a write's temporary file is when a later write beside it takes
// it for one a killed daemon left, and removes it: no write lasts this long.
const StaleTemp = 10 * time.Minute

// WriteFile writes what r holds, at most MaxFileBytes, as the file name within the
// session's directory, whole or not at all: to a new file beside it, then renamed over
// it, with the mode of the file it replaces (0644 for a new one). Its parent directories
// are made as needed, within the directory. Temporary files older than StaleTemp beside
// it, which a daemon killed mid-write left, are removed.
func (s *Session) WriteFile(ctx context.Context, name string, r io.Reader) (int64, error) {
	name, err := cleanPath(name)
	if err != nil {
		return 0, err
	}
	root, err := s.root(ctx)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return 0, fileError(dir, err)
		}
	}
	mode := os.FileMode(0o644)
	if info, err := root.Lstat(name); err == nil {
		if !info.Mode().IsRegular() {
			return 0, fmt.Errorf("%w: %s is not a regular file", ErrFileRefused, name)
		}
		mode = info.Mode().Perm()
	}
	sweepTemps(root, path.Dir(name))
	var b [8]byte
	rand.Read(b[:])
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".kiln-"+hex.EncodeToString(b[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return 0, fileError(name, err)
	}
	err = f.Chmod(mode) // the umask's bits too: the file replaced had them
	var n int64
	if err == nil {
		n, err = io.Copy(f, io.LimitReader(r, MaxFileBytes+1))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err == nil && n > MaxFileBytes:
		err = ErrFileTooBig
	case err == nil:
		if err = root.Rename(tmp, name); err != nil {
			err = fileError(name, err)
		}
	}
	if err != nil {
		root.Remove(tmp)
		return 0, err
	}
	return n, nil
}

// isTemp says whether name is a write's temporary file: .<name>.kiln-<16 hex digits>.
func isTemp(name string) bool {
	i := strings.LastIndex(name, ".kiln-")
	if !strings.HasPrefix(name, ".") || i < 1 || len(name)-i-len(".kiln-") != 16 {
		return false
	}
	_, err := hex.DecodeString(name[i+len(".kiln-"):])
	return err == nil
}

// sweepTemps removes the temporary files older than StaleTemp in dir within root.
func sweepTemps(root *os.Root, dir string) {
	d, err := root.Open(dir)
	if err != nil {
		return
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		if !isTemp(name) {
			continue
		}
		if info, err := root.Lstat(path.Join(dir, name)); err == nil && info.Mode().IsRegular() && time.Since(info.ModTime()) > StaleTemp {
			root.Remove(path.Join(dir, name))
		}
	}
}
