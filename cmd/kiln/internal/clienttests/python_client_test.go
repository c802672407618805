package clienttests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestPythonClientInAFreshVenv installs the Python client into a fresh `python -m venv`
// with pip offline (--no-index: nothing but the standard library builds it), then runs
// its tests across daemon restarts from there: a daemon killed and one stopped
// mid-execute, and an event stream followed across a restart.
func TestPythonClientInAFreshVenv(t *testing.T) {
	t.Parallel()
	src, err := filepath.Abs("../../../../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = t.TempDir() // not the source tree: the client must come from the venv
		cmd.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1",
			"KILN_TEST_KILN="+clitest.Command(t).Path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	run("python3", "-m", "venv", venv)
	python := filepath.Join(venv, "bin", "python")
	run(python, "-m", "pip", "install", "--no-index", src)
	if where := run(python, "-c", "import kiln_client; print(kiln_client.__file__)"); !strings.HasPrefix(where, venv) {
		t.Fatalf("kiln_client imported from %s; want the venv's", where)
	}
	t.Logf("%s", run(python, "-m", "unittest", "discover", "-v", "-s", filepath.Join(src, "tests"), "-p", "test_restart.py"))
}
