package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/poll"
)

// TestARecordedRunKilledIsEndedByTheNext: a kiln run --session killed with SIGKILL
// mid-run leaves its run running in the record; the session's next run records it
// failed, the host having ended before it did, and each of its calls answered: none
// without a reply, no ok reply but the one the program got.
func TestARecordedRunKilledIsEndedByTheNext(t *testing.T) {
	t.Parallel()
	dir, data, bin := t.TempDir(), t.TempDir(), t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "kiln-test-mcp")); err != nil {
		t.Fatal(err)
	}
	// The program opens the FIFO for writing, which waits for the test to open it for
	// reading: the test knows the program runs, a call answered and one hanging.
	if err := syscall.Mkfifo(filepath.Join(dir, "ready"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "p.py"), []byte(`import asyncio
hang = asyncio.ensure_future(demo.hang())
await demo.add({"a": 2, "b": 3})
with open("ready", "w") as f:
    f.write("running\n")
await hang
`), 0o600)
	os.WriteFile(filepath.Join(dir, "nothing.py"), []byte("return None\n"), 0o600)
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd := clitest.Command(t, "run", "--data", data, "--session", "s", "--mcp", "demo=kiln-test-mcp", "p.py")
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if ready := poll.ReadFIFO(t, filepath.Join(dir, "ready"), clitest.ReadyWithin); ready != "running\n" {
		t.Fatalf("read %q from the program; stderr:\n%s", ready, stderr.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	logOf := func() string {
		t.Helper()
		c := clitest.Command(t, "log", "--data", data, "--session", "s")
		c.Env = env
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("kiln log: %v\n%s", err, out)
		}
		return string(out)
	}
	if log := logOf(); strings.Contains(log, "program p-1 ended") {
		t.Fatalf("the killed run ended in the record before the next run:\n%s", log)
	}
	next := clitest.Command(t, "run", "--data", data, "--session", "s", "nothing.py")
	next.Dir, next.Env = dir, env
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("the next run: %v\n%s", err, out)
	}
	log := logOf()
	for _, want := range []string{
		" s program p-1 ended failed after ",
		"ms: the host ended before the program run did\n",
		" s program p-2 ended ok after ",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log has no %q:\n%s", want, log)
		}
	}
	var requests, replies, ok int
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(line, " tools.call "):
			requests++
		case strings.Contains(line, " reply ok "):
			replies++
			ok++
		case strings.Contains(line, " reply error ") && strings.Contains(line, "execution_ended: run p-1 ended before the tool answered"):
			replies++
		}
	}
	if requests < 1 || replies != requests || ok != 1 {
		t.Errorf("%d calls recorded, %d answered, %d of them ok; want each answered, the add alone ok:\n%s", requests, replies, ok, log)
	}
}
