package python

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// countingPython writes an interpreter wrapper that appends a line to a log at each
// start, and returns its path and that of the log.
func countingPython(t *testing.T) (python, log string) {
	t.Helper()
	real, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	python, log = filepath.Join(dir, "python"), filepath.Join(dir, "starts")
	script := "#!/bin/sh\necho start >> '" + log + "'\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(python, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return python, log
}

// starts is how many times the wrapper at log's side has started.
func starts(t *testing.T, log string) int {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("start\n"))
}

// testCache is a cache in a directory of the test's own, with the bounds Cached uses.
func testCache(t *testing.T) cache {
	return cache{dir: filepath.Join(t.TempDir(), "kiln", "python"), maxBytes: maxCacheEntryBytes, maxEntries: maxCacheEntries}
}

// cached runs c.installer and checks that what it returns installs kiln.program so that
// it imports, every module with its bytecode.
func cached(t *testing.T, c cache, python string) {
	t.Helper()
	in, err := c.installer(context.Background(), python, []string{"kiln.program"})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := in.Install(root); err != nil {
		t.Fatal(err)
	}
	for _, m := range embeddedModules() {
		dir, stem := path.Split(m)
		pyc, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "__pycache__", stem+".*.pyc"))
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m)+".py")); err != nil || len(pyc) != 1 {
			t.Errorf("%s: source %v, bytecode %q; want the source and one bytecode file", m, err, pyc)
		}
	}
	out, err := exec.Command(python, "-I", "-S", "-B", "-c",
		"import sys; sys.path.insert(0, sys.argv[1]); import kiln.program_driver", root).CombinedOutput()
	if err != nil {
		t.Fatalf("importing the installed modules: %v\n%s", err, out)
	}
}

// entryFile is the one entry in dir.
func entryFile(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"+entrySuffix))
	if len(files) != 1 {
		t.Fatalf("entries %q; want one", files)
	}
	return files[0]
}

// withEntry makes a cache that holds one entry, for a counting interpreter, and returns
// the three and the entry's file.
func withEntry(t *testing.T) (c cache, python, log, file string) {
	t.Helper()
	python, log = countingPython(t)
	c = testCache(t)
	cached(t, c, python)
	return c, python, log, entryFile(t, c.dir)
}

// readEntry reads and decodes the entry file.
func readEntry(t *testing.T, file string) (data []byte, key string, bytecode map[string][]byte) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err == nil {
		key, bytecode, err = decodeEntry(data)
	}
	if err != nil {
		t.Fatal(err)
	}
	return data, key, bytecode
}

// editEntry decodes the entry file, changes it and writes it back.
func editEntry(t *testing.T, file string, change func(key *string, bytecode map[string][]byte)) {
	t.Helper()
	_, key, bytecode := readEntry(t, file)
	change(&key, bytecode)
	if err := os.WriteFile(file, encodeEntry(key, bytecode), 0o600); err != nil {
		t.Fatal(err)
	}
}

// compiles reports whether c.installer compiled, counting the wrapper's starts: a
// compilation, then cached's import check, against the check alone.
func compiles(t *testing.T, c cache, python, log string) bool {
	t.Helper()
	before := starts(t, log)
	cached(t, c, python)
	return starts(t, log)-before >= 2
}

// TestCachedCompilesOnce checks that the first Cached compiles and keeps the bytecode,
// and the next reads it: no interpreter starts.
func TestCachedCompilesOnce(t *testing.T) {
	python, log := countingPython(t)
	c := testCache(t)
	if !compiles(t, c, python, log) {
		t.Fatal("the first Cached did not compile")
	}
	entryFile(t, c.dir)
	if compiles(t, c, python, log) {
		t.Errorf("the second Cached compiled; want the entry used")
	}
}

// TestCachedRefusesTamperedEntries spoils a kept entry in each way it checks for: the
// entry is refused, the packages compiled afresh, and a sound entry written in its place.
func TestCachedRefusesTamperedEntries(t *testing.T) {
	python, log := countingPython(t)
	c := testCache(t)
	cached(t, c, python)
	edit := func(change func(key *string, bytecode map[string][]byte)) func(t *testing.T, file string) {
		return func(t *testing.T, file string) { editEntry(t, file, change) }
	}
	anyPath := func(bytecode map[string][]byte) string {
		for path := range bytecode {
			return path
		}
		t.Fatal("no bytecode")
		return ""
	}
	cases := map[string]func(t *testing.T, file string){
		"readable by others": func(t *testing.T, file string) { os.Chmod(file, 0o644) },
		"directory writable by others": func(t *testing.T, file string) {
			os.Chmod(c.dir, 0o777)
			t.Cleanup(func() { os.Chmod(c.dir, 0o700) })
		},
		"a link": func(t *testing.T, file string) {
			moved := filepath.Join(t.TempDir(), "entry")
			if err := os.Rename(file, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, file); err != nil {
				t.Fatal(err)
			}
		},
		"another key":  edit(func(key *string, _ map[string][]byte) { *key = strings.Repeat("0", len(*key)) }),
		"no bytecode":  edit(func(_ *string, b map[string][]byte) { clear(b) }),
		"source check": edit(func(_ *string, b map[string][]byte) { b[anyPath(b)][4] = 0b11 }),
		"two magics":   edit(func(_ *string, b map[string][]byte) { b[anyPath(b)][0]++ }),
		"short":        edit(func(_ *string, b map[string][]byte) { p := anyPath(b); b[p] = b[p][:15] }),
		"outside the packages": edit(func(_ *string, b map[string][]byte) {
			b["kiln/__pycache__/../../escape.pyc"] = b[anyPath(b)]
		}),
		"not an embedded module": edit(func(_ *string, b map[string][]byte) {
			b["kiln/__pycache__/absent.cpython-311.pyc"] = b[anyPath(b)]
		}),
		"not an entry": func(t *testing.T, file string) { os.WriteFile(file, []byte("{"), 0o600) },
		"a FIFO, which an open that waits for a writer would hang on": func(t *testing.T, file string) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(file, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			file := entryFile(t, c.dir)
			spoil(t, file)
			_, statErr := os.Stat(file) // the entry as spoilt, if still there, is refused
			if compiled := compiles(t, c, python, log); statErr == nil && !compiled {
				t.Errorf("the spoilt entry was used")
			}
			if name == "directory writable by others" {
				return // refused for writing too; the next case starts from the entry as it was
			}
			fi, err := os.Lstat(entryFile(t, c.dir))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
				t.Errorf("the entry written in its place: %v, %v; want a regular file of mode 0600", fi, err)
			}
		})
	}
}

// TestCachedRefusesPartialEntries checks that an entry without the bytecode of every
// embedded module — one left out, one there twice, the file cut short at a file's end
// or inside one — is refused and compiled afresh, and that what is installed imports.
func TestCachedRefusesPartialEntries(t *testing.T) {
	c, python, log, file := withEntry(t)
	sound, key, bytecode := readEntry(t, file)
	paths := slices.Sorted(maps.Keys(bytecode))
	last := paths[len(paths)-1]
	without := maps.Clone(bytecode)
	delete(without, paths[0])
	twice := maps.Clone(bytecode)
	twice[strings.Replace(paths[0], ".cpython-", ".other-", 1)] = bytecode[paths[0]]
	withoutLast := maps.Clone(bytecode)
	delete(withoutLast, last)
	boundary := len(encodeEntry(key, withoutLast)) // the entry up to the last file
	cases := map[string][]byte{
		"a module left out":          encodeEntry(key, without),
		"a module twice":             encodeEntry(key, twice),
		"cut at the end of a file":   sound[:boundary],
		"cut inside a file":          sound[:len(sound)-1],
		"cut inside a length":        append(slices.Clone(sound), 0x80),
		"only the header":            []byte(entryMagic + key + "\n"),
		"the header without its end": []byte(entryMagic + key),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(file, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if !compiles(t, c, python, log) {
				t.Errorf("the partial entry was used")
			}
			if _, k, b := readEntry(t, file); k != key || checkBytecode(b) != nil {
				t.Errorf("the entry written in its place: key %q, %v; want key %q, sound", k, checkBytecode(b), key)
			}
		})
	}
}

// TestCachedEntryBound checks the bound on an entry's size: an entry of exactly
// c.maxBytes is written and used, and one byte less of bound refuses both.
func TestCachedEntryBound(t *testing.T) {
	c, python, log, file := withEntry(t)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()

	atBound := c
	atBound.maxBytes = size
	if compiles(t, atBound, python, log) {
		t.Errorf("an entry of %d bytes, the bound, was refused", size)
	}
	pastBound := c
	pastBound.maxBytes = size - 1
	if !compiles(t, pastBound, python, log) {
		t.Errorf("an entry of %d bytes, one past the bound, was used", size)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the entry over the bound of the reader is gone: %v", err)
	}

	// The entry now in the file stored under a bound of its size and one under it. (It
	// may differ in size from the first: the compile past the bound wrote a new one when
	// it came out smaller, as bytecode need not be byte for byte the same each compile.)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	size = int64(len(data))
	atBound.maxBytes, pastBound.maxBytes = size, size-1
	for _, tc := range []struct {
		c       cache
		written bool
	}{{atBound, true}, {pastBound, false}} {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		tc.c.store(file, data)
		if _, err := os.Stat(file); (err == nil) != tc.written {
			t.Errorf("bound %d, entry of %d bytes: written %v; want %v", tc.c.maxBytes, size, err == nil, tc.written)
		}
	}
}

// TestCachedKeepsTheEntriesUsedLast fills the cache with entries of other interpreters
// and versions, an entry of an earlier format and temporary files, and checks what
// storing an entry keeps: itself and the maxEntries-1 other entries used last, and the
// temporary files younger than staleTempAge; and that using an entry marks it used.
func TestCachedKeepsTheEntriesUsedLast(t *testing.T) {
	c, python, log, file := withEntry(t)
	c.maxEntries = 3
	sound, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, age time.Duration) string {
		t.Helper()
		p := filepath.Join(c.dir, name)
		at := time.Now().Add(-age)
		if err := os.WriteFile(p, sound, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The entry in use, made to look old: loading it marks it used.
	put(filepath.Base(file), 30*time.Hour)
	if compiles(t, c, python, log) {
		t.Fatal("the entry was not used")
	}
	if fi, err := os.Stat(file); err != nil || time.Since(fi.ModTime()) > time.Hour {
		t.Errorf("the entry used: %v, %v; want it marked used now", fi, err)
	}

	var others []string // oldest first
	for i := range 5 {
		others = append(others, put(fmt.Sprintf("%064d%s", i, entrySuffix), time.Duration(10-i)*time.Hour))
	}
	earlier := put("27c9e2d9e0a219e7c31435aa-08bb47400ea1804d5666075e4e64e5b9dc2d8fcbe63e8c523e0fa14ab3f0f977.json", time.Minute)
	staleTemp := put(tempPrefix+"stale", staleTempAge+time.Minute)
	freshTemp := put(tempPrefix+"fresh", time.Minute)
	if err := os.Remove(file); err != nil { // stored afresh, which prunes
		t.Fatal(err)
	}
	cached(t, c, python)

	got, _ := filepath.Glob(filepath.Join(c.dir, "*")) // dot files too
	want := []string{file, others[3], others[4], freshTemp}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("files kept %q; want %q (removed: the oldest entries, %s, %s)", got, want, earlier, staleTemp)
	}
}

// FuzzDecodeEntry checks that decodeEntry takes only what encodeEntry writes: whatever
// it decodes encodes to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(strings.Repeat("ab", 32), map[string][]byte{"kiln/__pycache__/a.cpython-311.pyc": []byte("x"), "kiln/b": nil}))
	f.Add([]byte(entryMagic + "k\n\x01a\x80\x01"))
	f.Add([]byte(entryMagic + "k\n\x81\x00a\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		key, bytecode, err := decodeEntry(data)
		if err != nil {
			return
		}
		if again := encodeEntry(key, bytecode); !bytes.Equal(again, data) {
			t.Errorf("decoded %q, %d files, which encode as %q; want %q", key, len(bytecode), again, data)
		}
	})
}

// TestCachedRebuildsAnEntryWithAFlippedByte checks that an entry whose bytecode has one
// byte changed inside a code object, its length and structure intact, is refused by its
// checksum and compiled afresh, and that the entry written in its place is sound.
func TestCachedRebuildsAnEntryWithAFlippedByte(t *testing.T) {
	c, python, log, file := withEntry(t)
	sound, key, bytecode := readEntry(t, file)
	paths := slices.Sorted(maps.Keys(bytecode))
	pyc := bytecode[paths[len(paths)/2]]
	at := bytes.Index(sound, pyc) + len(pyc)/2 // inside the code object, past the header
	flipped := slices.Clone(sound)
	flipped[at] ^= 0x5a
	if _, _, err := decodeEntry(flipped); !errors.Is(err, errBadEntry) {
		t.Fatalf("decoding the flipped entry: %v; want errBadEntry", err)
	}
	if err := os.WriteFile(file, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	if !compiles(t, c, python, log) {
		t.Fatal("the flipped entry was used")
	}
	if _, k, b := readEntry(t, file); k != key || checkBytecode(b) != nil {
		t.Errorf("the entry written in its place is not the sound one (key %q, %v)", k, checkBytecode(b))
	}
	if compiles(t, c, python, log) {
		t.Error("the rebuilt entry was not used")
	}
}
