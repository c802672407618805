// Package release snapshots an agent's behaviour policy.
//
// A policy is a directory of Python source that the agent may revise. A
// release is an immutable, validated snapshot of such a directory,
// identified by a content digest and stored under the data directory at
// <data>/releases/<id>.
//
// The identity of a snapshot is the lowercase hex SHA-256 over its files
// sorted by POSIX relative name (byte order), feeding for each file the
// u64 big-endian length of the name, the UTF-8 name, the u64 big-endian
// length of the content, and the content. Directories are not hashed.
//
// A snapshot holds every regular file under the source directory,
// recursively, except that directories named __pycache__ (Python's
// bytecode cache, holding the .pyc files) and .git are skipped entirely.
// Anything else must satisfy the rules or the snapshot is refused:
//
//   - no symlinks, to files or directories, including the root itself;
//   - only regular files (no devices, fifos or sockets);
//   - names are valid UTF-8;
//   - extensions are .py, .json or .md (case-sensitive; a file without an
//     extension is refused);
//   - at most MaxFiles files and MaxBytes bytes of content in total;
//   - at least one file.
package release

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxFiles is the largest number of files a snapshot may hold.
const MaxFiles = 128

// MaxBytes is the largest total size, in bytes, of a snapshot's file contents (2 MiB).
const MaxBytes = 2 << 20

// AllowedExtensions returns the file extensions a snapshot may contain.
func AllowedExtensions() []string { return []string{".py", ".json", ".md"} }

// The rules a snapshot can break. A refusal is a *RefusedError wrapping one
// of them, so callers can test for a rule with errors.Is.
var (
	ErrSymlink      = errors.New("symlinks are not allowed")
	ErrSpecialFile  = errors.New("only regular files are allowed (no devices, fifos or sockets)")
	ErrInvalidUTF8  = errors.New("name is not valid UTF-8")
	ErrBadName      = errors.New("name is not a clean relative path")
	ErrDuplicate    = errors.New("name occurs more than once")
	ErrExtension    = fmt.Errorf("extension not allowed (allowed: %s)", strings.Join(AllowedExtensions(), ", "))
	ErrTooManyFiles = fmt.Errorf("more than %d files", MaxFiles)
	ErrTooLarge     = fmt.Errorf("total content exceeds %d bytes (2 MiB)", MaxBytes)
	ErrEmpty        = errors.New("a release needs at least one file")
)

// ErrCorrupt reports a stored release whose tree no longer has its identity
// or no longer satisfies the rules.
var ErrCorrupt = errors.New("stored release is corrupt")

// RefusedError reports a snapshot refused by a rule.
type RefusedError struct {
	// Path is the offending POSIX relative name, or "" when the rule
	// concerns the tree as a whole.
	Path string
	// Rule is the rule broken, one of the Err variables of this package.
	Rule error
}

// Error names the path (quoted if it is not valid UTF-8) and the rule.
func (e *RefusedError) Error() string {
	switch {
	case e.Path == "":
		return e.Rule.Error()
	case utf8.ValidString(e.Path):
		return e.Path + ": " + e.Rule.Error()
	default:
		return fmt.Sprintf("%q: %v", e.Path, e.Rule)
	}
}

// Unwrap returns the rule.
func (e *RefusedError) Unwrap() error { return e.Rule }

func refused(name string, rule error) error { return &RefusedError{Path: name, Rule: rule} }

// File is one file of a snapshot.
type File struct {
	// Name is the POSIX relative path of the file, e.g. "pkg/mod.py".
	Name string
	// Data is the file's content.
	Data []byte
}

// Snapshot is a validated source tree: its files sorted by name, and its identity.
type Snapshot struct {
	// Files are the snapshot's files sorted by name, byte order.
	Files []File
	// ID is the snapshot's identity, see Identity.
	ID string
}

// Identity computes the identity of files (which need not be sorted; it
// sorts a copy by name, byte order).
func Identity(files []File) string {
	sorted := sortedFiles(files)
	h := sha256.New()
	for _, f := range sorted {
		writeField(h, []byte(f.Name))
		writeField(h, f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeField feeds h the u64 big-endian length of b, then b.
func writeField(h hash.Hash, b []byte) {
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
	h.Write(b)
}

// sortedFiles returns a copy of files sorted by name, byte order.
func sortedFiles(files []File) []File {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return sorted
}

// ValidID reports whether id is 64 lowercase hex characters.
func ValidID(id string) bool {
	if len(id) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkName applies the rules on a single file name: valid UTF-8, a clean
// relative POSIX path outside the skipped directories, and an allowed
// extension.
func checkName(name string) error {
	if !utf8.ValidString(name) {
		return refused(name, ErrInvalidUTF8)
	}
	parts := strings.Split(name, "/")
	for i, part := range parts {
		isDir := i < len(parts)-1
		if part == "" || part == "." || part == ".." || isDir && skippedDir(part) {
			return refused(name, ErrBadName)
		}
	}
	if !slices.Contains(AllowedExtensions(), path.Ext(name)) {
		return refused(name, ErrExtension)
	}
	return nil
}

// skippedDir reports whether a directory of this name is left out of snapshots.
func skippedDir(name string) bool { return name == "__pycache__" || name == ".git" }

// budget tracks the limits on file count and total size.
type budget struct {
	files int
	bytes int64
}

// addFile counts one more file, refusing it if it is one too many.
func (b *budget) addFile(name string) error {
	if b.files == MaxFiles {
		return refused(name, ErrTooManyFiles)
	}
	b.files++
	return nil
}

// addBytes counts n more bytes of content, refusing them if the total would
// exceed MaxBytes.
func (b *budget) addBytes(name string, n int64) error {
	if n > b.left() {
		return refused(name, ErrTooLarge)
	}
	b.bytes += n
	return nil
}

// left is how many bytes of content may still be added.
func (b *budget) left() int64 { return MaxBytes - b.bytes }

// New is the snapshot of files, checked against the rules, with its identity.
func New(files []File) (Snapshot, error) {
	sorted := sortedFiles(files)
	if err := checkFiles(sorted); err != nil {
		return Snapshot{}, fmt.Errorf("release: %w", err)
	}
	return Snapshot{Files: sorted, ID: Identity(sorted)}, nil
}

// validate checks an in-memory snapshot against the rules and its ID.
func validate(snap Snapshot) error {
	sorted := sortedFiles(snap.Files)
	if err := checkFiles(sorted); err != nil {
		return err
	}
	if id := Identity(sorted); id != snap.ID {
		return fmt.Errorf("snapshot id %q does not match its files (identity %s)", snap.ID, id)
	}
	return nil
}

// checkFiles checks files, sorted by name, against the rules.
func checkFiles(sorted []File) error {
	if len(sorted) == 0 {
		return refused("", ErrEmpty)
	}
	var b budget
	for i, f := range sorted {
		if err := checkName(f.Name); err != nil {
			return err
		}
		if i > 0 && sorted[i-1].Name == f.Name {
			return refused(f.Name, ErrDuplicate)
		}
		if err := b.addFile(f.Name); err != nil {
			return err
		}
		if err := b.addBytes(f.Name, int64(len(f.Data))); err != nil {
			return err
		}
	}
	return nil
}
