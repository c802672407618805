package python

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// supportedMinors are the CPython 3 minor versions the Python side supports.
var supportedMinors = []int{10, 11, 12, 13}

// TestPythonSuite runs the Python side's own unittest suite with real python3, and again
// with each other supported CPython found: pyenv's (under $PYENV_ROOT or ~/.pyenv) or
// python3.N on PATH. A version not found is skipped, saying so.
func TestPythonSuite(t *testing.T) {
	// python3 itself, unless it is one of the interpreters found (pyenv's shim runs one).
	real, err := exec.Command("python3", "-I", "-S", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	found := map[string]bool{}
	for _, minor := range supportedMinors {
		if python := findInterpreter(minor); python != "" {
			found[realPath(python)] = true
		}
	}
	if python3 := strings.TrimSpace(string(real)); !found[realPath(python3)] {
		t.Run("python3", func(t *testing.T) {
			t.Parallel()
			runSuite(t, python3)
		})
	}
	for _, minor := range supportedMinors {
		name := fmt.Sprintf("3.%d", minor)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			python := findInterpreter(minor)
			if python == "" {
				t.Skipf("no CPython %s found in pyenv or on PATH", name)
			}
			runSuite(t, python)
		})
	}
}

// realPath returns path with its symbolic links resolved, or path if they cannot be.
func realPath(path string) string {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		return resolved
	}
	return path
}

// runSuite runs the unittest suite under python, from this package's directory.
func runSuite(t *testing.T, python string) {
	t.Helper()
	cmd := exec.Command(python, "-B", "-m", "unittest", "discover", "-s", "tests", "-t", ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m unittest: %v\n%s", python, err, out)
	}
	t.Logf("%s: %s", python, lastLine(out))
}

// lastLine returns the last non-empty line of out.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// findInterpreter returns the path of a CPython 3.minor, the newest patch release pyenv
// holds, else python3.minor on PATH, else "".
func findInterpreter(minor int) string {
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".pyenv")
		}
	}
	exe := fmt.Sprintf("python3.%d", minor)
	if root != "" {
		found, _ := filepath.Glob(filepath.Join(root, "versions", fmt.Sprintf("3.%d.*", minor), "bin", exe))
		best, bestPatch := "", -1
		for _, path := range found {
			release := filepath.Base(filepath.Dir(filepath.Dir(path)))
			patch, err := strconv.Atoi(strings.TrimPrefix(release, fmt.Sprintf("3.%d.", minor)))
			if err == nil && patch > bestPatch {
				best, bestPatch = path, patch
			}
		}
		if best != "" {
			return best
		}
	}
	if path, err := exec.LookPath(exe); err == nil {
		return path
	}
	return ""
}

// TestInstallWritesThePackage checks the embedded package lands where a worker imports it.
func TestInstallWritesThePackage(t *testing.T) {
	dir := t.TempDir()
	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"__init__.py", "wire.py", "worker.py"} {
		if _, err := os.Stat(filepath.Join(dir, "kiln", name)); err != nil {
			t.Error(err)
		}
	}
	out, err := exec.Command("python3", "-I", "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import kiln.worker", dir).CombinedOutput()
	if err != nil {
		t.Errorf("importing the installed package: %v\n%s", err, out)
	}
}

// TestPrecompiledInstallsWhatTheModulesImport checks that a precompiled package holds the
// named modules and everything they import, each with bytecode the interpreter loads
// instead of compiling, and nothing else.
func TestPrecompiledInstallsWhatTheModulesImport(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	in, err := Precompiled(context.Background(), python, "kiln.worker")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := in.Install(dir); err != nil {
		t.Fatal(err)
	}
	for _, stem := range []string{"__init__", "worker", "wire", "cells"} {
		if _, err := os.Stat(filepath.Join(dir, "kiln", stem+".py")); err != nil {
			t.Error(err)
		}
		pyc, _ := filepath.Glob(filepath.Join(dir, "kiln", "__pycache__", stem+".*.pyc"))
		if len(pyc) != 1 {
			t.Errorf("kiln/%s.py: bytecode %q; want one file", stem, pyc)
		}
	}
	for _, absent := range []string{"kiln/program.py", "kiln/hooks.py", "kiln_hooks"} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(absent))); err == nil {
			t.Errorf("%s is installed, though nothing named imports it", absent)
		}
	}
	out, err := exec.Command(python, "-I", "-S", "-c",
		"import sys; sys.path.insert(0, sys.argv[1]); import kiln.worker", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("importing the installed modules: %v\n%s", err, out)
	}
}

// TestHooksPackagesAreInstalled checks that the sources and the precompiled packages both
// carry the hooks worker and the kiln_hooks SDK beside kiln, the SDK precompiled too, and
// that the hooks worker starts through the launcher from each: given a release without a
// manifest, it exits with status 2 and says why.
func TestHooksPackagesAreInstalled(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	pre, err := Precompiled(context.Background(), python, "kiln.hooks")
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]*Installer{"sources": Sources(), "precompiled": pre} {
		dir := t.TempDir()
		if err := in.Install(dir); err != nil {
			t.Fatal(err)
		}
		for _, src := range []string{"kiln/hooks.py", "kiln_hooks/__init__.py"} {
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(src))); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if name == "precompiled" {
			for _, stem := range []string{"__init__"} {
				pyc, _ := filepath.Glob(filepath.Join(dir, "kiln_hooks", "__pycache__", stem+".*.pyc"))
				if len(pyc) != 1 {
					t.Errorf("kiln_hooks/%s.py: bytecode %q; want one file", stem, pyc)
				}
			}
		}
		release := t.TempDir()
		cmd := exec.Command(python, Args(dir, "kiln.hooks", "--socket", filepath.Join(dir, "absent.sock"),
			"--session", "root", "--generation", "g-1", "--revision", "r1", "--release", release)...)
		cmd.Stdin = strings.NewReader("0123abcd\n")
		out, err := cmd.CombinedOutput()
		if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 2 {
			t.Errorf("%s: hooks worker without a manifest: %v, want exit status 2\n%s", name, err, out)
		}
		if !strings.Contains(string(out), "kiln hooks: cannot read the manifest") {
			t.Errorf("%s: diagnostics %q; want the missing manifest named", name, out)
		}
	}
}

// TestTheLauncherWaitsAtItsGate starts an interpreter before its packages are written:
// it waits at its gate, fd 3, until the host has written them and closed its end, and
// then runs the module from them (a hooks worker without a manifest, which exits with
// status 2 and says why).
func TestTheLauncherWaitsAtItsGate(t *testing.T) {
	// The interpreter itself, not a wrapper (a version manager's shim reads pipes of its
	// own before it runs python).
	real, err := exec.Command("python3", "-I", "-S", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatal(err)
	}
	python := strings.TrimSpace(string(real))
	dir, release := t.TempDir(), t.TempDir()
	gate, opened, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	cmd := exec.Command(python, GatedArgs(dir, 3, "kiln.hooks", "--socket", filepath.Join(dir, "absent.sock"),
		"--session", "root", "--generation", "g-1", "--revision", "r1", "--release", release)...)
	cmd.ExtraFiles = []*os.File{gate}
	cmd.Stdin = strings.NewReader("0123abcd\n")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gate.Close()
	// Readiness: the interpreter is set up and sleeps reading its gate, the one pipe it
	// reads before it imports anything of the packages.
	proc := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		// Where it sleeps: (anon_)pipe_read, or pipe_wait in kernels before 5.x.
		if data, _ := os.ReadFile(filepath.Join(proc, "wchan")); strings.Contains(string(data), "pipe_read") ||
			strings.Contains(string(data), "pipe_wait") {
			break
		}
		stat, _ := os.ReadFile(filepath.Join(proc, "stat"))
		if _, state, _ := strings.Cut(string(stat), ") "); strings.HasPrefix(state, "Z") || time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the interpreter did not wait at its gate; output %q", out.String())
		}
	}
	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	opened.Close()
	err = cmd.Wait()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 2 || !strings.Contains(out.String(), "kiln hooks: cannot read the manifest") {
		t.Errorf("after the gate: %v, %q; want exit status 2 and the missing manifest named", err, out.String())
	}
}
