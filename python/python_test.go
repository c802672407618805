package python

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonSuite runs the Python side's own unittest suite with real python3.
func TestPythonSuite(t *testing.T) {
	cmd := exec.Command("python3", "-B", "-m", "unittest", "discover", "-s", "tests", "-t", ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unittest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
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
