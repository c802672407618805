package python

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	pathpkg "path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/regfile"
)

// Cache bounds.
const (
	// maxCacheEntryBytes bounds an entry file: a larger one is neither written nor read.
	// The bytecode of every module of the packages is about a fiftieth of it.
	maxCacheEntryBytes = 16 << 20
	// maxCacheEntries is how many entries the cache keeps, of every interpreter and kiln
	// version together: the most recently used (using an entry marks it used). Storing
	// an entry removes the others.
	maxCacheEntries = 8
	// staleTempAge is the age past which a temporary file in the cache is the leftover
	// of a writer that did not finish, which storing an entry removes.
	staleTempAge = time.Hour
)

// entryMagic opens every entry file and names its format (see encodeEntry).
const entryMagic = "kiln bytecode entry 3\n"

// entrySuffix ends the name of every entry file: its key, then this.
const entrySuffix = ".entry"

// tempPrefix starts the name of an entry file being written.
const tempPrefix = ".entry-"

// pycUncheckedHash is the flags word of a .pyc file whose source is not checked (PEP
// 552): how compile writes every file.
const pycUncheckedHash = 0b01

// errBadEntry is a cache entry that is not used.
var errBadEntry = errors.New("python: cache entry refused")

// Cached returns an Installer of every module of the packages, each with its bytecode
// for the interpreter at pythonPath, as compiled by importing modules. The bytecode
// comes from the user's cache directory when an entry there holds it (a process that
// runs one child, as a cold kiln run does, then compiles nothing); otherwise it is
// compiled, and kept there.
//
// An entry is named for the interpreter's file (path, size, modification time), the
// modules and the embedded sources, and holds only bytecode: the sources installed
// beside it are always the embedded ones. It is used only if its directory and itself
// are the user's own and nobody else may write them, it is a regular file (not a link)
// of at most maxCacheEntryBytes, its checksum matches its bytecode (a byte changed in a
// code object, which CPython would run or crash on, is caught there), and it holds
// exactly what its name says: the bytecode of every embedded module, once, for one
// interpreter. Anything else is compiled afresh, and the entry written anew. A program runs as the user and can write the user's files, this cache among
// them, as it can the interpreter's if the user owns it.
//
// The cache keeps the maxCacheEntries entries used last, whatever their interpreter.
func Cached(ctx context.Context, pythonPath string, modules ...string) (*Installer, error) {
	root, err := os.UserCacheDir()
	if err != nil {
		bytecode, err := compileAll(ctx, pythonPath, modules)
		if err != nil {
			return nil, err
		}
		return withBytecode(bytecode)
	}
	c := cache{dir: filepath.Join(root, "kiln", "python"), maxBytes: maxCacheEntryBytes, maxEntries: maxCacheEntries}
	return c.installer(ctx, pythonPath, modules)
}

// A cache is a directory of entries and its bounds.
type cache struct {
	dir        string
	maxBytes   int64 // of an entry file
	maxEntries int   // kept by prune
}

// installer is Cached with its entries in c.
func (c cache) installer(ctx context.Context, pythonPath string, modules []string) (*Installer, error) {
	key, keyErr := entryKey(pythonPath, modules)
	file := filepath.Join(c.dir, key+entrySuffix)
	if keyErr == nil {
		if bytecode, err := c.load(file, key); err == nil {
			return withBytecode(bytecode)
		}
	}
	bytecode, err := compileAll(ctx, pythonPath, modules)
	if err != nil {
		return nil, err
	}
	in, err := withBytecode(bytecode)
	if err != nil {
		return nil, err
	}
	if keyErr == nil {
		c.store(file, encodeEntry(key, bytecode))
	}
	return in, nil
}

// compileAll compiles the packages and returns the bytecode of every module, checked as
// an entry's is.
func compileAll(ctx context.Context, pythonPath string, modules []string) (map[string][]byte, error) {
	bytecode, _, err := compileModules(ctx, pythonPath, modules)
	if err != nil {
		return nil, err
	}
	if err := checkBytecode(bytecode); err != nil {
		return nil, fmt.Errorf("python: compiling the Python packages: %w", err)
	}
	return bytecode, nil
}

// entryKey names the entry of the interpreter at pythonPath, modules and the embedded
// sources.
func entryKey(pythonPath string, modules []string) (string, error) {
	abs, err := filepath.Abs(pythonPath)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, part := range []string{"kiln bytecode 2", abs, strconv.FormatInt(fi.Size(), 10),
		strconv.FormatInt(fi.ModTime().UnixNano(), 10), strings.Join(modules, ","), compile} {
		writeField(h, []byte(part))
	}
	for _, f := range Sources().files {
		writeField(h, []byte(f.Path))
		writeField(h, f.Data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeField writes b to w with its length ahead, so that no two sequences of fields
// write the same bytes.
func writeField(w io.Writer, b []byte) {
	w.Write(binary.AppendUvarint(nil, uint64(len(b))))
	w.Write(b)
}

// encodeEntry is the entry file of key and bytecode: entryMagic, the key and a newline,
// the SHA-256 of the files in hex and a newline, then the files: each in the order of
// its path, as the path's length (uvarint), the path, the bytecode's length (uvarint)
// and the bytecode. The checksum catches what checkBytecode cannot see: bytes changed
// inside a code object, which CPython would run, or crash on, as they are.
func encodeEntry(key string, bytecode map[string][]byte) []byte {
	var body []byte
	for _, path := range slices.Sorted(maps.Keys(bytecode)) {
		body = binary.AppendUvarint(body, uint64(len(path)))
		body = append(body, path...)
		body = binary.AppendUvarint(body, uint64(len(bytecode[path])))
		body = append(body, bytecode[path]...)
	}
	sum := sha256.Sum256(body)
	b := append([]byte(entryMagic), key...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, sum[:])
	b = append(b, '\n')
	return append(b, body...)
}

// decodeEntry reads an entry file as encodeEntry writes it, and only so: the checksum
// matching, the paths in increasing order, each length in its shortest form, nothing
// after the last file.
func decodeEntry(data []byte) (key string, bytecode map[string][]byte, err error) {
	rest, ok := bytes.CutPrefix(data, []byte(entryMagic))
	if !ok {
		return "", nil, fmt.Errorf("%w: not an entry", errBadEntry)
	}
	k, rest, ok := bytes.Cut(rest, []byte("\n"))
	if !ok {
		return "", nil, fmt.Errorf("%w: no key", errBadEntry)
	}
	sum, rest, ok := bytes.Cut(rest, []byte("\n"))
	if want := sha256.Sum256(rest); !ok || string(sum) != hex.EncodeToString(want[:]) {
		return "", nil, fmt.Errorf("%w: its checksum does not match its bytecode", errBadEntry)
	}
	field := func() ([]byte, bool) {
		n, size := binary.Uvarint(rest)
		if size <= 0 || size != len(binary.AppendUvarint(nil, n)) || n > uint64(len(rest)-size) {
			return nil, false
		}
		f := rest[size : size+int(n)]
		rest = rest[size+int(n):]
		return f, true
	}
	bytecode = map[string][]byte{}
	last := ""
	for len(rest) > 0 {
		path, ok1 := field()
		pyc, ok2 := field()
		if !ok1 || !ok2 || len(bytecode) > 0 && string(path) <= last {
			return "", nil, fmt.Errorf("%w: file %d is cut short or out of order", errBadEntry, len(bytecode)+1)
		}
		last = string(path)
		bytecode[last] = pyc
	}
	return string(k), bytecode, nil
}

// embeddedModules are the embedded modules, as "kiln/worker".
func embeddedModules() []string {
	var names []string
	for _, pkg := range packages {
		sources, _ := fs.Glob(files, pkg+"/*.py")
		for _, s := range sources {
			names = append(names, strings.TrimSuffix(s, ".py"))
		}
	}
	return names
}

// checkBytecode checks that bytecode is what compile writes of the packages: for every
// embedded module one file, at the module's __pycache__ path, of bytecode whose source
// is not checked, all for one interpreter (one magic number and one tag), and nothing
// else. An entry missing a module is refused, so no child meets a module it cannot
// import.
func checkBytecode(bytecode map[string][]byte) error {
	want := embeddedModules()
	var magic, tag string
	seen := map[string]bool{}
	for _, path := range slices.Sorted(maps.Keys(bytecode)) {
		pyc := bytecode[path]
		module := moduleFile(path)
		_, name := pathpkg.Split(path)
		_, t, _ := strings.Cut(name, ".") // "cpython-311.pyc"
		switch {
		case !fs.ValidPath(path) || !slices.Contains(want, module) || path != module[:strings.LastIndexByte(module, '/')]+"/__pycache__/"+name ||
			!strings.HasSuffix(t, ".pyc"):
			return fmt.Errorf("%w: %s is not the bytecode of a module of the packages", errBadEntry, path)
		case seen[module]:
			return fmt.Errorf("%w: %s holds the bytecode of %s twice", errBadEntry, path, module)
		// magic (2 bytes, then \r\n), flags, then the source's hash
		case len(pyc) < 16 || string(pyc[2:4]) != "\r\n" || binary.LittleEndian.Uint32(pyc[4:8]) != pycUncheckedHash:
			return fmt.Errorf("%w: %s is not bytecode as compile writes it", errBadEntry, path)
		case magic != "" && (string(pyc[:4]) != magic || t != tag):
			return fmt.Errorf("%w: %s is for another interpreter than the rest", errBadEntry, path)
		}
		seen[module], magic, tag = true, string(pyc[:4]), t
	}
	for _, m := range want {
		if !seen[m] {
			return fmt.Errorf("%w: no bytecode of %s", errBadEntry, m)
		}
	}
	return nil
}

// ownDir checks that dir is a directory, not a link, of the user's, that nobody else may
// write.
func ownDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", errBadEntry, dir)
	}
	return owned(dir, fi, 0o022)
}

// owned checks that fi is the user's and has none of the permission bits of others.
func owned(name string, fi fs.FileInfo, others fs.FileMode) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is not the user's", errBadEntry, name)
	}
	if fi.Mode().Perm()&others != 0 {
		return fmt.Errorf("%w: %s has mode %v", errBadEntry, name, fi.Mode().Perm())
	}
	return nil
}

// ownDirs checks the cache directory and its parent with ownDir.
func (c cache) ownDirs() error {
	for _, d := range []string{filepath.Dir(c.dir), c.dir} {
		if err := ownDir(d); err != nil {
			return err
		}
	}
	return nil
}

// load returns the bytecode file holds, if it may be used as the entry named key, and
// marks the entry used.
func (c cache) load(file, key string) (map[string][]byte, error) {
	if err := c.ownDirs(); err != nil {
		return nil, err
	}
	// Not following, not waiting: a link or a FIFO put in the entry's place is refused.
	f, err := regfile.Open(file, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadEntry, err)
	}
	defer f.Close()
	if err := owned(file, f.Info, 0o077); err != nil {
		return nil, err
	}
	data, err := f.ReadAll(c.maxBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadEntry, err)
	}
	k, bytecode, err := decodeEntry(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if k != key {
		return nil, fmt.Errorf("%w: %s is not the entry it is named for", errBadEntry, file)
	}
	if err := checkBytecode(bytecode); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	now := syscall.NsecToTimeval(time.Now().UnixNano())
	syscall.Futimes(int(f.Fd()), []syscall.Timeval{now, now}) // used: pruning keeps it
	return bytecode, nil
}

// store writes data as file unless it is over c.maxBytes, then prunes the cache; an
// entry that cannot be written costs the next process a compilation, nothing else.
func (c cache) store(file string, data []byte) {
	if int64(len(data)) > c.maxBytes || os.MkdirAll(c.dir, 0o700) != nil || c.ownDirs() != nil {
		return
	}
	tmp, err := os.CreateTemp(c.dir, tempPrefix+"*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), file) != nil {
		os.Remove(tmp.Name())
		return
	}
	c.prune(file)
}

// prune keeps the c.maxEntries entries used last, file among them, and removes the
// others, the temporary files older than staleTempAge, and every other file of the
// cache directory (an entry of an earlier format, say).
func (c cache) prune(file string) {
	dirents, _ := os.ReadDir(c.dir)
	modified := map[string]time.Time{}
	var entries []string
	for _, d := range dirents {
		fi, err := d.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		name := filepath.Join(c.dir, d.Name())
		switch {
		case strings.HasPrefix(d.Name(), tempPrefix):
			if time.Since(fi.ModTime()) > staleTempAge {
				os.Remove(name)
			}
		case strings.HasSuffix(d.Name(), entrySuffix) && name != file:
			entries = append(entries, name)
			modified[name] = fi.ModTime()
		case name != file:
			os.Remove(name)
		}
	}
	slices.SortFunc(entries, func(a, b string) int { return cmp.Compare(modified[b].UnixNano(), modified[a].UnixNano()) })
	for i, e := range entries {
		if i+1 >= c.maxEntries { // file is kept first
			os.Remove(e)
		}
	}
}
