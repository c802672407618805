package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	kilndaemon "github.com/kilnrt/kiln/daemon"
)

// TestPythonClient runs the Python client's tests against a real daemon.
func TestPythonClient(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{Listen: "127.0.0.1:0"})
	tok, err := kilndaemon.Token(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-m", "unittest", "discover", "-v", "-s", filepath.Join(root, "tests"))
	cmd.Env = append(os.Environ(), "KILN_TEST_SOCKET="+d.info.Socket, "KILN_TEST_URL=http://"+d.info.Listen, "KILN_TEST_TOKEN="+tok, "PYTHONPATH="+root, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python client tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
