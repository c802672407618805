package python

import (
	"os"
	"os/exec"
	"path/filepath"
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
