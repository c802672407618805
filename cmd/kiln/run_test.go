package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/poll"
)

func TestRunExitStatuses(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.py")
	os.WriteFile(prog, []byte("return 1"), 0o600)
	for _, c := range []struct {
		args  []string
		stdin string
		want  int
	}{
		{[]string{"run", prog}, "", exitOK},
		{[]string{"run", "-"}, "return [1, 2]", exitOK},
		{[]string{"run", "-"}, "raise ValueError('no')", exitFail},
		{[]string{"run", "--json", "-"}, "import os\nos._exit(0)", exitFail},
		{[]string{"run", filepath.Join(dir, "missing.py")}, "", exitFail},
		{[]string{"run"}, "", exitUsage},
		{[]string{"run", prog, prog}, "", exitUsage},
		{[]string{"run", "--timeout", "-1s", prog}, "", exitUsage},
		{[]string{"run", "--memory", "0", prog}, "", exitUsage},
		{[]string{"run", "--max-value-bytes", "-5", prog}, "", exitUsage},
		{[]string{"run", "--max-log-bytes", "63", prog}, "", exitUsage},
		{[]string{"run", "--max-log-bytes", "64", prog}, "", exitOK},
		{[]string{"run", "--cpu-seconds", "x", prog}, "", exitUsage},
		{[]string{"run", "--cpu-seconds", "2147483647", prog}, "", exitOK},
		{[]string{"run", "--cpu-seconds", "2147483648", prog}, "", exitUsage},
		{[]string{"run", "--cpu-seconds", "18446744074", prog}, "", exitUsage},
		{[]string{"run", "--cpu-seconds", "9223372036854775806", prog}, "", exitUsage},
	} {
		var out, errs strings.Builder
		if got := run(t.Context(), c.args, strings.NewReader(c.stdin), &out, &errs); got != c.want {
			t.Errorf("kiln %q: exit %d; want %d (stderr %q)", c.args, got, c.want, errs.String())
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64 // 0: an error
	}{
		{"1", 1},
		{"268435456", 256 << 20},
		{"256M", 256 << 20},
		{"256MiB", 256 << 20},
		{"256mib", 256 << 20},
		{"1K", 1 << 10},
		{"2GiB", 2 << 30},
		{"2 G", 2 << 30},
		{"10B", 10},
		{"4611686018427387904", 1 << 62},
		{"4611686018427387905", 0},
		{"4194304G", 1 << 52},
		{"0", 0},
		{"-1", 0},
		{"", 0},
		{"M", 0},
		{"1.5G", 0},
		{"12X", 0},
	} {
		got, err := parseBytes(tt.in)
		if tt.want == 0 && err == nil || tt.want != 0 && (err != nil || got != tt.want) {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// TestFileNamespace calls the kiln namespace's functions directly: paths inside the
// working directory work, and every way out of it is refused.
func TestFileNamespace(t *testing.T) {
	base := t.TempDir()
	work := filepath.Join(base, "work")
	os.MkdirAll(filepath.Join(work, "sub"), 0o700)
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("alpha"), 0o600)
	os.WriteFile(filepath.Join(work, "bin"), []byte{0xff, 0xfe}, 0o600)
	os.WriteFile(filepath.Join(base, "secret"), []byte("s"), 0o600)
	os.Symlink("../secret", filepath.Join(work, "out"))
	os.Symlink(base, filepath.Join(work, "absout"))
	os.Symlink("a.txt", filepath.Join(work, "in"))
	os.Symlink("sub", filepath.Join(work, "subdir"))
	if err := syscall.Mkfifo(filepath.Join(work, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := openWorkDir(work)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ns := fileNamespace(root)
	read, list := ns.Funcs["read_file"], ns.Funcs["list_dir"]
	for _, tt := range []struct {
		arg  kiln.Value
		want string // the text, or the error
	}{
		{kiln.String("a.txt"), "alpha"},
		{kiln.NewObject(kiln.Member{Key: "path", Value: kiln.String("a.txt")}), "alpha"},
		{kiln.String("in"), "alpha"},
		{kiln.String("sub/../a.txt"), "alpha"},
		{kiln.String("./a.txt"), "alpha"},
		{kiln.String("out"), "error: out is outside the working directory"},
		{kiln.String("absout/secret"), "error: absout/secret is outside the working directory"},
		{kiln.String("../secret"), "error: ../secret is outside the working directory"},
		{kiln.String(filepath.Join(base, "secret")), "error: " + filepath.Join(base, "secret") + " is outside the working directory"},
		{kiln.String("missing"), "error: missing does not exist"},
		{kiln.String("sub"), "error: sub is a directory"},
		{kiln.String("bin"), "error: bin is not UTF-8 text"},
		{kiln.String("fifo"), "error: fifo is not a regular file"},
		{kiln.String(""), "error: the path is empty"},
		{nil, `error: want a path: a string, or {"path": string}`},
		{kiln.Number(1), `error: want a path: a string, or {"path": string}`},
	} {
		if got := readText(t, read, tt.arg); got != tt.want {
			t.Errorf("read_file(%v) = %q; want %q", tt.arg, got, tt.want)
		}
	}
	for _, tt := range []struct {
		arg  kiln.Value
		want string
	}{
		{nil, `[{"name":"a.txt","type":"file","size":5},{"name":"absout","type":"symlink","size":0},{"name":"bin","type":"file","size":2},{"name":"fifo","type":"other","size":0},{"name":"in","type":"symlink","size":0},{"name":"out","type":"symlink","size":0},{"name":"sub","type":"dir","size":0},{"name":"subdir","type":"symlink","size":0}]`},
		{kiln.String("subdir"), `[]`},
		{kiln.String(".."), "error: .. is outside the working directory"},
		{kiln.String("absout"), "error: absout is outside the working directory"},
		{kiln.String("a.txt"), "error: a.txt is not a directory"},
		{kiln.String("fifo"), "error: fifo is not a directory"},
	} {
		v, err := list(t.Context(), tt.arg)
		got := ""
		if err != nil {
			got = "error: " + err.Error()
		} else if text, err := kiln.EncodeValue(v); err != nil {
			t.Fatal(err)
		} else {
			got = string(text)
		}
		if got != tt.want {
			t.Errorf("list_dir(%v) = %s; want %s", tt.arg, got, tt.want)
		}
	}
}

// readText calls read_file with arg: the text, or "error: " and the error.
func readText(t *testing.T, read kiln.Func, arg kiln.Value) string {
	v, err := read(t.Context(), arg)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(v.(kiln.String))
}

// TestFileNamespaceSymlinkChains follows a chain of symbolic links as Linux does: 40
// links to a file inside the working directory are read, 41 are refused, and a chain
// of 9 (past os.Root's 8) whose last link leads out is refused as leading out.
func TestFileNamespaceSymlinkChains(t *testing.T) {
	base := t.TempDir()
	work := filepath.Join(base, "work")
	os.MkdirAll(work, 0o700)
	os.WriteFile(filepath.Join(work, "a.txt"), []byte("alpha"), 0o600)
	os.WriteFile(filepath.Join(base, "secret"), []byte("s"), 0o600)
	chain := func(name, target string, links int) {
		for i := links; i > 1; i-- {
			next := fmt.Sprintf("%s%d", name, i)
			os.Symlink(target, filepath.Join(work, next))
			target = next
		}
		os.Symlink(target, filepath.Join(work, name))
	}
	chain("at", "a.txt", 40)
	chain("past", "a.txt", 41)
	chain("out", "../secret", 9)
	root, err := openWorkDir(work)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	read := fileNamespace(root).Funcs["read_file"]
	for _, tt := range []struct{ path, want string }{
		{"at", "alpha"},
		{"past", "error: past: too many levels of symbolic links"},
		{"out", "error: out is outside the working directory"},
	} {
		if got := readText(t, read, kiln.String(tt.path)); got != tt.want {
			t.Errorf("read_file(%q) = %q; want %q", tt.path, got, tt.want)
		}
	}
}

// TestReadFileLimit reads a file at maxReadFileBytes and one byte past it.
func TestReadFileLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "at"), []byte(strings.Repeat("x", maxReadFileBytes)), 0o600)
	os.WriteFile(filepath.Join(dir, "past"), []byte(strings.Repeat("x", maxReadFileBytes+1)), 0o600)
	root, err := openWorkDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if v, err := readFile(root, "at"); err != nil || len(v.(kiln.String)) != maxReadFileBytes {
		t.Errorf("at the limit: %v", err)
	}
	if _, err := readFile(root, "past"); err == nil || !strings.Contains(err.Error(), "is larger than") {
		t.Errorf("one past the limit: %v; want an error", err)
	}
}

// TestRunEndsOnSignal sends kiln run SIGINT, SIGTERM and SIGHUP while its program
// runs: each ends the run as abort, prints the result, exits 1 and leaves no run
// directory behind.
func TestRunEndsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir, tmp := t.TempDir(), t.TempDir()
			// The program opens the FIFO for writing, which waits for the test to open
			// it for reading: the test knows the program runs.
			if err := syscall.Mkfifo(filepath.Join(dir, "ready"), 0o600); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "p.py"), []byte("import time\nwith open('ready', 'w') as f:\n    f.write('go')\ntime.sleep(60)\n"), 0o600)
			cmd := clitest.Command(t, "run", "--json", "p.py")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			var stdout strings.Builder
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
			})
			if ready := poll.ReadFIFO(t, filepath.Join(dir, "ready"), clitest.ReadyWithin); ready != "go" {
				t.Fatalf("read %q from the program", ready)
			}
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Errorf("kiln run ended %v; want exit status 1", err)
			}
			if !strings.HasPrefix(stdout.String(), `{"status":"abort",`) {
				t.Errorf("stdout %q; want the result, status abort", stdout.String())
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "kiln-program-*")); len(left) != 0 {
				t.Errorf("left %q behind", left)
			}
		})
	}
}

// TestListDirLimit lists a directory of maxListEntries entries and one of one more.
func TestListDirLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"at", "past"} {
		os.Mkdir(filepath.Join(dir, name), 0o700)
	}
	for i := range maxListEntries + 1 {
		name := fmt.Sprintf("f%05d", i)
		if i < maxListEntries {
			if err := os.WriteFile(filepath.Join(dir, "at", name), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "past", name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root, err := openWorkDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	list := fileNamespace(root).Funcs["list_dir"]
	if v, err := list(t.Context(), kiln.String("at")); err != nil || len(v.(kiln.Array)) != maxListEntries {
		t.Errorf("at the limit: %v; want %d entries", err, maxListEntries)
	}
	if _, err := list(t.Context(), kiln.String("past")); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("one past the limit: %v; want an error", err)
	}
}

// TestRunSaysAWrapperCostsEveryStart: a --python that is a wrapper (as a version
// manager's shim is) is named on stderr with the interpreter it runs, which is what the
// run then starts; the interpreter itself, or --json, prints no such line.
func TestRunSaysAWrapperCostsEveryStart(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	real, err := kiln.FindPython(t.Context(), "/usr/bin/python3")
	if err != nil {
		t.Skip(err)
	}
	shim := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(shim, []byte("#!/bin/sh\nexec "+real.Path+" \"$@\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		note bool
	}{
		{[]string{"run", "--python", shim, "-"}, true},
		{[]string{"run", "--json", "--python", shim, "-"}, false},
		{[]string{"run", "--python", real.Path, "-"}, false},
		{[]string{"exec", "--data", t.TempDir(), "--python", shim, "import sys; print(sys.executable)"}, true},
	} {
		var out, errs strings.Builder
		if got := run(t.Context(), c.args, strings.NewReader("import sys\nreturn sys.executable"), &out, &errs); got != exitOK {
			t.Fatalf("kiln %q: exit %d (stderr %q)", c.args, got, errs.String())
		}
		note := "[kiln] python " + shim + " is a wrapper, run at every start to learn that it runs " + real.Path + ":"
		if strings.Contains(errs.String(), note) != c.note {
			t.Errorf("kiln %q: stderr %q; want the note %v", c.args, errs.String(), c.note)
		}
		if !strings.Contains(out.String(), real.Path) {
			t.Errorf("kiln %q: stdout %q; want the interpreter run, %s", c.args, out.String(), real.Path)
		}
	}
}

// TestRunBindingsTakeKeywordArguments: the kiln bindings are called as tools are, with
// keyword arguments or one value, and kiln run --help says so.
func TestRunBindingsTakeKeywordArguments(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	prog := `return [await kiln.read_file(path="notes.txt"), await kiln.read_file("notes.txt"),
        [e["name"] for e in await kiln.list_dir(path=".")]]`
	cmd := clitest.Command(t, "run", "--json", "-")
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(prog)
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"value":["hi","hi",["notes.txt"]]`) {
		t.Errorf("kiln run: %s %v; want the file read twice and listed", out, err)
	}
	var help strings.Builder
	run(t.Context(), []string{"run", "--help"}, strings.NewReader(""), &help, &help)
	if !strings.Contains(help.String(), `await NAME.<tool>(a=1, b="x"), keyword arguments`) {
		t.Errorf("kiln run --help does not show the keyword calling convention:\n%s", help.String())
	}
}
