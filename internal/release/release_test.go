package release

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// writeFiles creates files (POSIX relative name to content) under dir.
// dataDir is a temporary data directory, its read-only releases included in its removal.
func dataDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() { RemoveAll(dir) })
	return dir
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	makeWritable(dir) // a stored release is read-only, but its owner may make it writable
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// exampleTree is a fixed tree exercising nesting, non-ASCII names and
// content, an empty file, and byte-order sorting ("a-b.md" < "a.py" <
// "a/b.py", "B.md" < "a...").
var exampleTree = map[string]string{
	"a.py":            "print('a')\n",
	"a-b.md":          "# a-b\n",
	"a/b.py":          "def b():\n    return 'ünïcödé ✓'\n",
	"a/c/d.json":      `{"π": 3.14159, "emoji": "🔥"}`,
	"B.md":            "upper\n",
	"é/naïve.py":      "x = '日本語'\n",
	"empty.md":        "",
	"pkg/__init__.py": "",
}

func newTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	return dir
}

func mustRead(t *testing.T, dir string) Snapshot {
	t.Helper()
	snap, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// pythonIdentity is an independent implementation of the identity, using
// only hashlib, os and struct; it walks the tree named by $TREE itself.
const pythonIdentity = `
import hashlib, os, struct
root = os.environ["TREE"]
entries = []
for dirpath, dirnames, filenames in os.walk(root):
    for fn in filenames:
        full = os.path.join(dirpath, fn)
        rel = os.path.relpath(full, root).replace(os.sep, "/")
        with open(full, "rb") as f:
            entries.append((rel.encode("utf-8"), f.read()))
entries.sort(key=lambda e: e[0])
h = hashlib.sha256()
for name, data in entries:
    h.update(struct.pack(">Q", len(name)))
    h.update(name)
    h.update(struct.pack(">Q", len(data)))
    h.update(data)
print(h.hexdigest())
`

func TestIdentityMatchesPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	dir := newTree(t, exampleTree)
	cmd := exec.Command(python, "-c", pythonIdentity)
	cmd.Env = append(os.Environ(), "TREE="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	want := strings.TrimSpace(string(out))

	snap := mustRead(t, dir)
	if snap.ID != want {
		t.Errorf("Read ID = %s, python = %s", snap.ID, want)
	}
	if got := Identity(snap.Files); got != want {
		t.Errorf("Identity = %s, python = %s", got, want)
	}
	var names []string
	for _, f := range snap.Files {
		names = append(names, f.Name)
	}
	wantNames := "B.md a-b.md a.py a/b.py a/c/d.json empty.md pkg/__init__.py é/naïve.py"
	if got := strings.Join(names, " "); got != wantNames {
		t.Errorf("names = %s, want %s", got, wantNames)
	}
}

func TestIdentityIgnoresOrder(t *testing.T) {
	files := []File{{"b.py", []byte("b")}, {"a.py", []byte("a")}}
	reversed := []File{files[1], files[0]}
	if Identity(files) != Identity(reversed) {
		t.Error("identity depends on the order of files")
	}
	if files[0].Name != "b.py" {
		t.Error("Identity sorted its argument in place")
	}
	// Length prefixes keep name and content apart.
	if Identity([]File{{"a.py", []byte("x")}}) == Identity([]File{{"a.pyx", nil}}) {
		t.Error("name/content boundary is ambiguous")
	}
	if !ValidID(Identity(files)) {
		t.Error("identity is not a valid id")
	}
}

func TestChangesChangeDigest(t *testing.T) {
	base := mustRead(t, newTree(t, exampleTree)).ID
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"rename", func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "a.py"), filepath.Join(dir, "a2.py")); err != nil {
				t.Fatal(err)
			}
		}},
		{"move to subdir", func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "a.py"), filepath.Join(dir, "pkg", "a.py")); err != nil {
				t.Fatal(err)
			}
		}},
		{"add", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"new.md": ""}) }},
		{"content", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"a/b.py": "changed"}) }},
		{"one byte", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"a.py": "print('b')\n"}) }},
		{"remove", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "empty.md")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newTree(t, exampleTree)
			tt.change(t, dir)
			if id := mustRead(t, dir).ID; id == base {
				t.Errorf("digest unchanged: %s", id)
			}
		})
	}
}

func TestSkippedDirsDoNotChangeDigest(t *testing.T) {
	base := mustRead(t, newTree(t, exampleTree)).ID
	dir := newTree(t, exampleTree)
	writeFiles(t, dir, map[string]string{
		"__pycache__/a.cpython-311.pyc":     "\x00bytecode",
		"pkg/__pycache__/x.cpython-311.pyc": "\x00bytecode",
		".git/HEAD":                         "ref: refs/heads/main\n",
		".git/hooks/pre-commit.sh":          "#!/bin/sh\n",
	})
	// Whatever is inside a skipped dir is not looked at, not even a symlink.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "__pycache__", "link.py")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if id := mustRead(t, dir).ID; id != base {
		t.Errorf("digest changed to %s from %s", id, base)
	}
}

// assertRefused checks that err is a refusal for rule naming path.
func assertRefused(t *testing.T, err error, rule error, path string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want refusal %q", rule)
	}
	if !errors.Is(err, rule) {
		t.Errorf("error %q is not %q", err, rule)
	}
	for _, want := range []string{"release: ", path, rule.Error()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestSymlinkRefused(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		dir := newTree(t, exampleTree)
		if err := os.Symlink("../a.py", filepath.Join(dir, "pkg", "link.py")); err != nil {
			t.Fatal(err)
		}
		_, err := Read(dir)
		assertRefused(t, err, ErrSymlink, "pkg/link.py")
	})
	t.Run("dir", func(t *testing.T) {
		dir := newTree(t, exampleTree)
		if err := os.Symlink("a", filepath.Join(dir, "linkdir")); err != nil {
			t.Fatal(err)
		}
		_, err := Read(dir)
		assertRefused(t, err, ErrSymlink, "linkdir")
	})
	t.Run("dangling", func(t *testing.T) {
		dir := newTree(t, exampleTree)
		if err := os.Symlink("nowhere", filepath.Join(dir, "gone.md")); err != nil {
			t.Fatal(err)
		}
		_, err := Read(dir)
		assertRefused(t, err, ErrSymlink, "gone.md")
	})
	t.Run("root", func(t *testing.T) {
		dir := newTree(t, exampleTree)
		link := filepath.Join(t.TempDir(), "root")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		_, err := Read(link)
		assertRefused(t, err, ErrSymlink, link)
	})
}

// numbered returns n files f000.py ... with one byte each.
func numbered(n int) map[string]string {
	files := make(map[string]string, n)
	for i := range n {
		files[fmt.Sprintf("d/f%03d.py", i)] = "x"
	}
	return files
}

func TestFileCountLimit(t *testing.T) {
	snap := mustRead(t, newTree(t, numbered(MaxFiles)))
	if len(snap.Files) != MaxFiles {
		t.Errorf("got %d files, want %d", len(snap.Files), MaxFiles)
	}
	_, err := Read(newTree(t, numbered(MaxFiles+1)))
	assertRefused(t, err, ErrTooManyFiles, "d/f128.py")
	if !strings.Contains(err.Error(), "more than 128 files") {
		t.Errorf("error %q does not say the limit", err)
	}
}

func TestExtensionRefused(t *testing.T) {
	for _, name := range []string{"run.sh", "pkg/README", "Makefile", "a.PY", "mod.pyc", "data.json.bak", ".git"} {
		t.Run(name, func(t *testing.T) {
			dir := newTree(t, exampleTree)
			writeFiles(t, dir, map[string]string{name: "x"})
			_, err := Read(dir)
			assertRefused(t, err, ErrExtension, name)
			if !strings.Contains(err.Error(), ".py, .json, .md") {
				t.Errorf("error %q does not list the allowed extensions", err)
			}
		})
	}
}

func TestSizeLimit(t *testing.T) {
	half := strings.Repeat("x", MaxBytes/2)
	snap := mustRead(t, newTree(t, map[string]string{"a.py": half, "b.py": half}))
	total := 0
	for _, f := range snap.Files {
		total += len(f.Data)
	}
	if total != MaxBytes {
		t.Errorf("total = %d, want %d", total, MaxBytes)
	}

	_, err := Read(newTree(t, map[string]string{"a.py": half, "b.py": half + "y"}))
	assertRefused(t, err, ErrTooLarge, "b.py")
	if !strings.Contains(err.Error(), "2097152") {
		t.Errorf("error %q does not say the limit", err)
	}
	_, err = Read(newTree(t, map[string]string{"big.md": strings.Repeat("z", MaxBytes+1)}))
	assertRefused(t, err, ErrTooLarge, "big.md")
}

func TestEmptyTreeRefused(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"empty":           nil,
		"only pycache":    {"__pycache__/a.cpython-311.pyc": "x"},
		"only empty dirs": nil,
	} {
		t.Run(name, func(t *testing.T) {
			dir := newTree(t, files)
			if name == "only empty dirs" {
				if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Read(dir)
			assertRefused(t, err, ErrEmpty, dir)
		})
	}
}

func TestSpecialFileRefused(t *testing.T) {
	t.Run("fifo", func(t *testing.T) {
		dir := newTree(t, exampleTree)
		if err := syscall.Mkfifo(filepath.Join(dir, "pipe.py"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(dir)
		assertRefused(t, err, ErrSpecialFile, "pipe.py")
	})
	t.Run("socket", func(t *testing.T) {
		dir := newTree(t, exampleTree)
		l, err := net.Listen("unix", filepath.Join(dir, "s.py"))
		if err != nil {
			t.Skipf("unix socket: %v", err)
		}
		defer l.Close()
		_, err = Read(dir)
		assertRefused(t, err, ErrSpecialFile, "s.py")
	})
}

func TestInvalidUTF8NameRefused(t *testing.T) {
	dir := newTree(t, exampleTree)
	name := "bad\xff.py"
	if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
		t.Skipf("filesystem refuses non-UTF-8 names: %v", err)
	}
	_, err := Read(dir)
	assertRefused(t, err, ErrInvalidUTF8, `"bad\xff.py"`)
}

func TestReadNotADirectory(t *testing.T) {
	dir := newTree(t, exampleTree)
	if _, err := Read(filepath.Join(dir, "a.py")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Read of a file: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing dir: %v", err)
	}
}

func TestStoreOpenRoundTrip(t *testing.T) {
	data := dataDir(t)
	snap := mustRead(t, newTree(t, exampleTree))
	dir, err := Store(data, snap)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(data, "releases", snap.ID); dir != want || Dir(data, snap.ID) != want {
		t.Errorf("Store dir = %s, Dir = %s, want %s", dir, Dir(data, snap.ID), want)
	}
	assertModes(t, dir)

	got, err := Open(data, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	assertSameSnapshot(t, got, snap)

	// The stored tree is itself a source tree with the same identity.
	if again := mustRead(t, dir); again.ID != snap.ID {
		t.Errorf("stored tree reads as %s, want %s", again.ID, snap.ID)
	}
	assertNoTemp(t, data)
}

// assertModes checks files are 0444 and directories 0555 under dir.
func assertModes(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o444)
		if d.IsDir() {
			want = fs.ModeDir | 0o555
		}
		if info.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, info.Mode(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func assertSameSnapshot(t *testing.T, got, want Snapshot) {
	t.Helper()
	if got.ID != want.ID || len(got.Files) != len(want.Files) {
		t.Fatalf("got %s with %d files, want %s with %d", got.ID, len(got.Files), want.ID, len(want.Files))
	}
	for i := range got.Files {
		if got.Files[i].Name != want.Files[i].Name || !bytes.Equal(got.Files[i].Data, want.Files[i].Data) {
			t.Errorf("file %d: got %q, want %q", i, got.Files[i].Name, want.Files[i].Name)
		}
	}
}

// assertNoTemp checks no temp dir is left in <data>/releases.
func assertNoTemp(t *testing.T, data string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(data, "releases"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !ValidID(e.Name()) {
			t.Errorf("left behind in releases: %s", e.Name())
		}
	}
}

func TestStoreTwice(t *testing.T) {
	data := dataDir(t)
	snap := mustRead(t, newTree(t, exampleTree))
	first, err := Store(data, snap)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Store(data, snap)
	if err != nil {
		t.Fatalf("second Store: %v", err)
	}
	if first != second {
		t.Errorf("second Store returned %s, want %s", second, first)
	}
	assertNoTemp(t, data)
}

func TestStoreConcurrent(t *testing.T) {
	data := dataDir(t)
	snap := mustRead(t, newTree(t, exampleTree))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = Store(data, snap) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	assertNoTemp(t, data)
	if _, err := Open(data, snap.ID); err != nil {
		t.Error(err)
	}
}

func TestStoreDetectsCorruptExisting(t *testing.T) {
	data := dataDir(t)
	snap := mustRead(t, newTree(t, exampleTree))
	dir, err := Store(data, snap)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"a.py": "tampered"})
	_, err = Store(data, snap)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "stored release is corrupt") || !strings.Contains(err.Error(), snap.ID) {
		t.Errorf("Store over a tampered release: %v", err)
	}
}

func TestStoreRejectsInvalidSnapshot(t *testing.T) {
	good := mustRead(t, newTree(t, exampleTree))
	withFiles := func(files ...File) Snapshot { return Snapshot{Files: files, ID: Identity(files)} }
	tests := []struct {
		name string
		snap Snapshot
		want string
	}{
		{"wrong id", Snapshot{Files: good.Files, ID: strings.Repeat("0", 64)}, "does not match its files"},
		{"empty", withFiles(), ErrEmpty.Error()},
		{"escape", withFiles(File{"../x.py", nil}), ErrBadName.Error()},
		{"absolute", withFiles(File{"/x.py", nil}), ErrBadName.Error()},
		{"dot", withFiles(File{"./x.py", nil}), ErrBadName.Error()},
		{"pycache", withFiles(File{"__pycache__/x.py", nil}), ErrBadName.Error()},
		{"extension", withFiles(File{"x.sh", nil}), ErrExtension.Error()},
		{"duplicate", withFiles(File{"x.py", nil}, File{"x.py", nil}), ErrDuplicate.Error()},
		{"too large", withFiles(File{"x.py", make([]byte, MaxBytes+1)}), ErrTooLarge.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := dataDir(t)
			_, err := Store(data, tt.snap)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "release: store ") {
				t.Errorf("Store: %v, want error containing %q", err, tt.want)
			}
			if _, statErr := os.Stat(filepath.Join(data, "releases")); !errors.Is(statErr, fs.ErrNotExist) {
				t.Errorf("refused Store touched the data dir: %v", statErr)
			}
		})
	}
}

func TestOpenDetectsTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string)
	}{
		{"content", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"a/b.py": "evil"}) }},
		{"added file", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"extra.py": ""}) }},
		{"removed file", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "a.py")); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink", func(t *testing.T, dir string) {
			if err := os.Symlink("a.py", filepath.Join(dir, "l.py")); err != nil {
				t.Fatal(err)
			}
		}},
		{"disallowed file", func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"run.sh": ""}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := dataDir(t)
			snap := mustRead(t, newTree(t, exampleTree))
			dir, err := Store(data, snap)
			if err != nil {
				t.Fatal(err)
			}
			makeWritable(dir)
			tt.tamper(t, dir)
			_, err = Open(data, snap.ID)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "release: open "+snap.ID) {
				t.Errorf("Open of a tampered release: %v", err)
			}
		})
	}
}

func TestOpenIgnoresPycache(t *testing.T) {
	data := dataDir(t)
	snap := mustRead(t, newTree(t, exampleTree))
	dir, err := Store(data, snap)
	if err != nil {
		t.Fatal(err)
	}
	// Running the policy may write Python's bytecode cache into the release.
	writeFiles(t, dir, map[string]string{"pkg/__pycache__/__init__.cpython-311.pyc": "\x00"})
	if _, err := Open(data, snap.ID); err != nil {
		t.Error(err)
	}
}

func TestOpenMissing(t *testing.T) {
	id := strings.Repeat("ab", 32)
	_, err := Open(t.TempDir(), id)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), id) {
		t.Errorf("Open of a missing release: %v", err)
	}
}

func TestOpenInvalidID(t *testing.T) {
	data := dataDir(t)
	for _, id := range []string{"", "../../etc", strings.Repeat("A", 64)} {
		if _, err := Open(data, id); err == nil || !strings.Contains(err.Error(), "invalid id") {
			t.Errorf("Open(%q): %v", id, err)
		}
	}
}

func TestValidID(t *testing.T) {
	tests := map[string]bool{
		strings.Repeat("0", 64):               true,
		strings.Repeat("0123456789abcdef", 4): true,
		strings.Repeat("a", 63):               false,
		strings.Repeat("a", 65):               false,
		strings.Repeat("A", 64):               false,
		strings.Repeat("g", 64):               false,
		"":                                    false,
		strings.Repeat("a", 63) + "/":         false,
		".tmp-" + strings.Repeat("a", 59):     false,
	}
	for id, want := range tests {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestAllowedExtensions(t *testing.T) {
	exts := AllowedExtensions()
	if strings.Join(exts, " ") != ".py .json .md" {
		t.Errorf("AllowedExtensions() = %v", exts)
	}
	exts[0] = ".sh"
	if AllowedExtensions()[0] != ".py" {
		t.Error("AllowedExtensions shares its slice with callers")
	}
}
