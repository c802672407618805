package python

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// maxCacheEntryBytes bounds what a cache entry may hold; a larger one is not read. The
// packages' bytecode, base64-encoded, is about a tenth of it.
const maxCacheEntryBytes = 16 << 20

// maxEntriesPerInterpreter is how many entries the cache keeps for one interpreter and
// set of modules: one for each kiln version in use, the newest.
const maxEntriesPerInterpreter = 4

// pycUncheckedHash is the flags word of a .pyc file whose source is not checked (PEP
// 552): how compile writes every file.
const pycUncheckedHash = 0b01

// errBadEntry is a cache entry that is not used.
var errBadEntry = errors.New("python: cache entry refused")

// Cached returns what Precompiled(ctx, pythonPath, modules...) does, from the user's
// cache directory when an entry there holds it (a process that runs one child, as a cold
// kiln run does, then compiles nothing), and keeps it there when none does.
//
// An entry is named for the interpreter's file (path, size, modification time), the
// modules and the embedded sources, and holds only bytecode: the sources installed
// beside it are always the embedded ones. It is used only if its directory and itself
// are the user's own and nobody else may write them, it is a regular file (not a link),
// and it holds exactly what its name says, the bytecode of embedded modules; anything
// else is compiled afresh. A program runs as the user and can write the user's files,
// this cache among them, as it can the interpreter's if the user owns it.
func Cached(ctx context.Context, pythonPath string, modules ...string) (*Installer, error) {
	root, err := os.UserCacheDir()
	if err != nil {
		return Precompiled(ctx, pythonPath, modules...)
	}
	return cachedIn(ctx, filepath.Join(root, "kiln", "python"), pythonPath, modules)
}

// cacheEntry is what an entry file holds.
type cacheEntry struct {
	Key      string            `json:"key"`
	Bytecode map[string][]byte `json:"bytecode"` // by path: kiln/__pycache__/worker.cpython-311.pyc
}

// cachedIn is Cached with its entries in dir.
func cachedIn(ctx context.Context, dir, pythonPath string, modules []string) (*Installer, error) {
	interp, key, err := entryKey(pythonPath, modules)
	if err != nil {
		return Precompiled(ctx, pythonPath, modules...)
	}
	file := filepath.Join(dir, interp+"-"+key+".json")
	if bytecode, err := loadEntry(dir, file, key); err == nil {
		if in, err := withBytecode(bytecode); err == nil {
			return in, nil
		}
	}
	bytecode, err := compileModules(ctx, pythonPath, modules)
	if err != nil {
		return nil, err
	}
	in, err := withBytecode(bytecode)
	if err != nil {
		return nil, err
	}
	storeEntry(dir, file, interp, cacheEntry{Key: key, Bytecode: bytecode})
	return in, nil
}

// entryKey names the entry of the interpreter at pythonPath and modules: interp for the
// interpreter's file and the modules, key for those and the embedded sources too.
func entryKey(pythonPath string, modules []string) (interp, key string, err error) {
	abs, err := filepath.Abs(pythonPath)
	if err != nil {
		return "", "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	for _, part := range []string{"kiln bytecode 1", abs, strconv.FormatInt(fi.Size(), 10),
		strconv.FormatInt(fi.ModTime().UnixNano(), 10), strings.Join(modules, ","), compile} {
		writeField(h, []byte(part))
	}
	interp = hex.EncodeToString(h.Sum(nil)[:12])
	for _, f := range Sources().files {
		writeField(h, []byte(f.Path))
		writeField(h, f.Data)
	}
	return interp, hex.EncodeToString(h.Sum(nil)), nil
}

// writeField writes b to w with its length ahead, so that no two sequences of fields
// write the same bytes.
func writeField(w io.Writer, b []byte) {
	w.Write(binary.AppendUvarint(nil, uint64(len(b))))
	w.Write(b)
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

// loadEntry returns the bytecode file holds, if it may be used as the entry named key.
func loadEntry(dir, file, key string) (map[string][]byte, error) {
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := ownDir(d); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxCacheEntryBytes {
		return nil, fmt.Errorf("%w: %s is not a regular file of at most %d bytes", errBadEntry, file, maxCacheEntryBytes)
	}
	if err := owned(file, fi, 0o077); err != nil {
		return nil, err
	}
	var e cacheEntry
	if err := json.NewDecoder(io.LimitReader(f, maxCacheEntryBytes)).Decode(&e); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errBadEntry, file, err)
	}
	if e.Key != key || len(e.Bytecode) == 0 {
		return nil, fmt.Errorf("%w: %s is not the entry it is named for", errBadEntry, file)
	}
	var magic []byte
	for _, path := range slices.Sorted(maps.Keys(e.Bytecode)) {
		pyc := e.Bytecode[path]
		// magic (2 bytes, then \r\n), flags, then the source's hash: one magic for all
		if len(pyc) < 16 || string(pyc[2:4]) != "\r\n" || binary.LittleEndian.Uint32(pyc[4:8]) != pycUncheckedHash ||
			magic != nil && string(pyc[:4]) != string(magic) {
			return nil, fmt.Errorf("%w: %s: %s is not bytecode as compile writes it", errBadEntry, file, path)
		}
		magic = pyc[:4]
	}
	return e.Bytecode, nil
}

// storeEntry writes e as file, and removes the oldest entries of the same interpreter
// and modules beyond maxEntriesPerInterpreter; an entry that cannot be written costs the
// next process a compilation, nothing else.
func storeEntry(dir, file, interp string, e cacheEntry) {
	data, err := json.Marshal(e)
	if err != nil || os.MkdirAll(dir, 0o700) != nil || ownDir(filepath.Dir(dir)) != nil || ownDir(dir) != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".entry-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), file) != nil {
		os.Remove(tmp.Name())
		return
	}
	// The newest entries of this interpreter and modules stay, for kiln versions used in
	// turn; the oldest beyond them go.
	entries, _ := filepath.Glob(filepath.Join(dir, interp+"-*.json"))
	modified := map[string]int64{}
	for _, e := range entries {
		if fi, err := os.Lstat(e); err == nil {
			modified[e] = fi.ModTime().UnixNano()
		}
	}
	slices.SortFunc(entries, func(a, b string) int { return cmp.Compare(modified[b], modified[a]) })
	kept := 1
	for _, e := range entries {
		if e == file {
			continue
		}
		if kept < maxEntriesPerInterpreter {
			kept++
			continue
		}
		os.Remove(e)
	}
}
