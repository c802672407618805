package python

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// cached runs cachedIn and checks that what it returns installs kiln.program so that it
// imports.
func cached(t *testing.T, dir, python string) {
	t.Helper()
	in, err := cachedIn(context.Background(), dir, python, []string{"kiln.program"})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := in.Install(root); err != nil {
		t.Fatal(err)
	}
	pyc, _ := filepath.Glob(filepath.Join(root, "kiln", "__pycache__", "program_driver.*.pyc"))
	if len(pyc) != 1 {
		t.Errorf("bytecode of kiln/program_driver.py: %q; want one file", pyc)
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
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("entries %q; want one", files)
	}
	return files[0]
}

// TestCachedCompilesOnce checks that the first Cached compiles and keeps the bytecode,
// and the next reads it: no interpreter starts.
func TestCachedCompilesOnce(t *testing.T) {
	python, log := countingPython(t)
	dir := filepath.Join(t.TempDir(), "kiln", "python")
	cached(t, dir, python)
	compiled := starts(t, log)
	if compiled == 0 {
		t.Fatal("the first Cached did not compile")
	}
	entryFile(t, dir)
	cached(t, dir, python)
	if n := starts(t, log) - compiled - 1; n != 0 { // the import check starts it once
		t.Errorf("the second Cached started the interpreter %d times; want none", n)
	}
}

// TestCachedRefusesTamperedEntries spoils a kept entry in each way it checks for: the
// entry is refused, the packages compiled afresh, and a sound entry written in its place.
func TestCachedRefusesTamperedEntries(t *testing.T) {
	python, log := countingPython(t)
	dir := filepath.Join(t.TempDir(), "kiln", "python")
	cached(t, dir, python)
	edit := func(change func(e *cacheEntry)) func(t *testing.T, file string) {
		return func(t *testing.T, file string) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var e cacheEntry
			if err := json.Unmarshal(data, &e); err != nil {
				t.Fatal(err)
			}
			change(&e)
			if data, err = json.Marshal(e); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	anyPath := func(e *cacheEntry) string {
		for path := range e.Bytecode {
			return path
		}
		t.Fatal("no bytecode")
		return ""
	}
	cases := map[string]func(t *testing.T, file string){
		"readable by others": func(t *testing.T, file string) { os.Chmod(file, 0o644) },
		"directory writable by others": func(t *testing.T, file string) {
			os.Chmod(dir, 0o777)
			t.Cleanup(func() { os.Chmod(dir, 0o700) })
		},
		"a link": func(t *testing.T, file string) {
			moved := filepath.Join(t.TempDir(), "entry.json")
			if err := os.Rename(file, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, file); err != nil {
				t.Fatal(err)
			}
		},
		"another key":  edit(func(e *cacheEntry) { e.Key = strings.Repeat("0", len(e.Key)) }),
		"no bytecode":  edit(func(e *cacheEntry) { e.Bytecode = nil }),
		"source check": edit(func(e *cacheEntry) { e.Bytecode[anyPath(e)][4] = 0b11 }),
		"two magics":   edit(func(e *cacheEntry) { e.Bytecode[anyPath(e)][0]++ }),
		"short":        edit(func(e *cacheEntry) { p := anyPath(e); e.Bytecode[p] = e.Bytecode[p][:15] }),
		"outside the packages": edit(func(e *cacheEntry) {
			e.Bytecode["kiln/__pycache__/../../escape.pyc"] = e.Bytecode[anyPath(e)]
		}),
		"not an embedded module": edit(func(e *cacheEntry) {
			e.Bytecode["kiln/__pycache__/absent.cpython-311.pyc"] = e.Bytecode[anyPath(e)]
		}),
		"not JSON": func(t *testing.T, file string) { os.WriteFile(file, []byte("{"), 0o600) },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			file := entryFile(t, dir)
			spoil(t, file)
			before := starts(t, log)
			_, statErr := os.Stat(file) // the entry as spoilt, if still there, is refused
			cached(t, dir, python)
			if statErr == nil && starts(t, log)-before < 2 { // a compilation, then the import check
				t.Errorf("the spoilt entry was used")
			}
			if name == "directory writable by others" {
				return // refused for writing too; the next case starts from the entry as it was
			}
			fi, err := os.Lstat(entryFile(t, dir))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
				t.Errorf("the entry written in its place: %v, %v; want a regular file of mode 0600", fi, err)
			}
		})
	}
}

// TestCachedKeepsTheNewestEntries checks that the entries of other sources for the same
// interpreter and modules are kept up to maxEntriesPerInterpreter, the newest, and the
// oldest removed.
func TestCachedKeepsTheNewestEntries(t *testing.T) {
	python, _ := countingPython(t)
	dir := filepath.Join(t.TempDir(), "kiln", "python")
	cached(t, dir, python)
	file := entryFile(t, dir)
	prefix := file[:strings.LastIndexByte(file, '-')]
	var others []string
	for i := range maxEntriesPerInterpreter {
		other := fmt.Sprintf("%s-%d.json", prefix, i)
		data, err := os.ReadFile(file)
		if err == nil {
			err = os.WriteFile(other, data, 0o600)
		}
		if err == nil { // oldest first
			at := time.Now().Add(time.Duration(i-maxEntriesPerInterpreter) * time.Hour)
			err = os.Chtimes(other, at, at)
		}
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, other)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	cached(t, dir, python)
	got, _ := filepath.Glob(prefix + "-*.json")
	want := append([]string{file}, others[1:]...) // the new one and the newest others
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("entries %q; want %q", got, want)
	}
}
