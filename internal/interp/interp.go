// Package interp finds the CPython interpreter kiln runs: it resolves a name such as
// "python3" — through PATH and through wrappers like version-manager shims — to the
// interpreter's own executable, and checks its version once, so that every worker and
// program is started by exec'ing the real binary directly.
//
// What a probe learns of an interpreter that is its own executable (sys.executable is
// the path it was run by: no wrapper between) is kept in the user's cache directory,
// keyed by that path and the size and modification time of the file it names, so that a
// later process finds it without spawning the interpreter. A link is its own key (a
// virtual environment's python is a link whose behaviour differs from its target's). A
// wrapper is probed every time: what it runs may change while it does not (a version
// manager's shim chooses by the directory and the environment). What it runs is kept
// under that interpreter's own path, and named in Interpreter.Wrapper's company, so a
// caller can say which path spares the wrapper.
package interp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnrt/kiln/internal/regfile"
)

// MinMajor and MinMinor are the oldest CPython kiln supports.
const (
	MinMajor = 3
	MinMinor = 10
)

// probeTimeout bounds the version probe. A version manager's shim starts a shell and
// the interpreter behind it, which on a loaded machine takes seconds; the bound is for an
// interpreter that never answers.
const probeTimeout = 30 * time.Second

// ErrUnsupported is an interpreter that is not CPython 3.10 or newer, or not Python.
var ErrUnsupported = errors.New("interp: unsupported interpreter")

// ErrNotFound is a name that names no executable file: a path that does not exist or
// cannot be run, or a command not on PATH.
var ErrNotFound = errors.New("interp: no such interpreter")

// Interpreter is a resolved CPython.
type Interpreter struct {
	Path    string // sys.executable: the binary itself
	Version string // e.g. "3.11.7"
	// Wrapper is the path name was found at when it is not Path but a wrapper that
	// runs it, such as a version manager's shim: each Find runs it again.
	Wrapper string `json:",omitempty"`
}

// probe prints what Find needs, one item a line, without running site hooks.
const probe = `import sys
print(sys.executable)
print(sys.implementation.name)
print("%d.%d.%d" % sys.version_info[:3])
`

// Find resolves name (a path, or a command looked up in PATH) and checks that it is
// CPython 3.10 or newer, from the cache when it holds the answer for the file as it is.
func Find(ctx context.Context, name string) (Interpreter, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return Interpreter{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	key, keyErr := keyOf(path)
	if keyErr == nil {
		if in, ok := key.load(); ok {
			return in, nil
		}
	}
	in, err := probePath(ctx, path)
	if err != nil {
		return in, err
	}
	if keyErr == nil {
		key.store(in)
	}
	if abs, err := filepath.Abs(path); err == nil && abs != in.Path {
		// A wrapper: what it runs is its own key, found at once when named itself.
		if target, err := keyOf(in.Path); err == nil {
			target.store(in)
		}
		in.Wrapper = abs
	}
	return in, nil
}

// probePath runs the probe with the interpreter at path.
func probePath(ctx context.Context, path string) (Interpreter, error) {
	probeCtx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(probeCtx, path, "-I", "-S", "-c", probe)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil { // the caller gave up: that says nothing of the interpreter
			return Interpreter{}, fmt.Errorf("interp: probing %s: %w", path, ctx.Err())
		}
		return Interpreter{}, fmt.Errorf("%w: %s: %v: %s", ErrUnsupported, path, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) < 3 {
		return Interpreter{}, fmt.Errorf("%w: %s: unexpected probe output %q", ErrUnsupported, path, stdout.String())
	}
	in := Interpreter{Path: lines[0], Version: lines[2]}
	if lines[1] != "cpython" {
		return Interpreter{}, fmt.Errorf("%w: %s is %s, not CPython", ErrUnsupported, path, lines[1])
	}
	if !atLeast(in.Version, MinMajor, MinMinor) {
		return Interpreter{}, fmt.Errorf("%w: %s is Python %s; kiln needs %d.%d or newer", ErrUnsupported, path, in.Version, MinMajor, MinMinor)
	}
	if in.Path == "" {
		in.Path = path
	}
	return in, nil
}

// atLeast reports whether version "X.Y.Z" is at least major.minor.
func atLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	x, err1 := strconv.Atoi(parts[0])
	y, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return x > major || x == major && y >= minor
}

// cacheKey identifies an interpreter's file as it is now.
type cacheKey struct {
	Path    string `json:"path"` // as looked up, absolute; links are not resolved
	Size    int64  `json:"size"` // of the file it names
	ModTime int64  `json:"mtime_ns"`
}

// cacheEntry is what the cache holds for one file.
type cacheEntry struct {
	cacheKey
	Interpreter Interpreter `json:"interpreter"`
}

func keyOf(path string) (cacheKey, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return cacheKey{}, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return cacheKey{}, err
	}
	return cacheKey{Path: abs, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}, nil
}

// file is the cache file of k's path, in the user's cache directory.
func (k cacheKey) file() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(k.Path))
	return filepath.Join(dir, "kiln", "interp", hex.EncodeToString(sum[:16])+".json"), nil
}

// load is the cached answer for k, when there is one for the file exactly as it is.
func (k cacheKey) load() (Interpreter, bool) {
	file, err := k.file()
	if err != nil {
		return Interpreter{}, false
	}
	data, err := readEntry(file)
	if err != nil {
		return Interpreter{}, false
	}
	var e cacheEntry
	if json.Unmarshal(data, &e) != nil || e.cacheKey != k || e.Interpreter.Path != k.Path ||
		!atLeast(e.Interpreter.Version, MinMajor, MinMinor) {
		return Interpreter{}, false
	}
	return e.Interpreter, true
}

// maxEntryBytes bounds what load reads of a cache file: an entry takes a few hundred.
const maxEntryBytes = 64 << 10

// readEntry returns what file holds, if it is a regular file of at most maxEntryBytes.
// Whatever else stands in its place is refused at once: a FIFO is not waited on, and a
// large file is not read.
func readEntry(file string) ([]byte, error) {
	f, err := regfile.Open(file, true)
	if err != nil {
		return nil, fmt.Errorf("interp: %w", err)
	}
	defer f.Close()
	data, err := f.ReadAll(maxEntryBytes)
	if err != nil {
		return nil, fmt.Errorf("interp: %w", err)
	}
	return data, nil
}

// store keeps in for k, when k's path is the interpreter itself; a cache that cannot be
// written costs the next process a probe, nothing else.
func (k cacheKey) store(in Interpreter) {
	if in.Path != k.Path {
		return // a wrapper: probed every time
	}
	file, err := k.file()
	if err != nil {
		return
	}
	data, err := json.Marshal(cacheEntry{cacheKey: k, Interpreter: in})
	if err != nil || os.MkdirAll(filepath.Dir(file), 0o700) != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".entry-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), file) != nil {
		os.Remove(tmp.Name())
	}
}
