package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestKilnStartedFromACell runs kiln from a cell, where it lives in the worker's PID
// namespace and reads the host's /proc: it starts its own workers, its sweep leaves the
// live directories of the temporary directory it shares alone, and the lease it took,
// once it is killed, does not hold its session for good.
func TestKilnStartedFromACell(t *testing.T) {
	t.Parallel()
	shared := t.TempDir() // the temporary directory both kilns use
	live := filepath.Join(shared, fmt.Sprintf("kiln-worker-p%d-live", os.Getpid()))
	if err := os.Mkdir(live, 0o700); err != nil {
		t.Fatal(err)
	}
	nested := t.TempDir()
	kiln := clitest.Command(t).Path
	cell := fmt.Sprintf(`import os, subprocess, sys
kiln, data = %s, %s
run = [kiln, "exec", "--python", sys.executable, "--data", data]
for extra in ([], ["--sandbox", "none"]):
    r = subprocess.run(run + extra + ["print('nested ran')"], capture_output=True, text=True, timeout=300)
    print("exit", r.returncode, r.stdout.strip(), r.stderr.strip()[-300:].replace("\n", " "))
held = subprocess.Popen(run + ["--session", "held", "print('holding', flush=True); import time; time.sleep(600)"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
print(held.stdout.readline().strip())
held.kill()
held.wait()
held.stdout.close()`, strconv.Quote(kiln), strconv.Quote(nested))
	outer := clitest.Command(t, "exec", "--sandbox", "none", "--data", t.TempDir(), cell)
	outer.Env = append(os.Environ(), "TMPDIR="+shared)
	out, err := outer.CombinedOutput()
	if err != nil {
		t.Fatalf("the outer kiln: %v\n%s", err, out)
	}
	if want := "exit 0 nested ran"; strings.Count(string(out), want) != 2 || !strings.Contains(string(out), "holding") {
		t.Errorf("the nested kilns said:\n%s\nwant %q twice, then holding", out, want)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live kiln's directory after the nested kilns' sweeps: %v", err)
	}
	again := clitest.Command(t, "exec", "--data", nested, "--session", "held", "print('taken over')")
	if out, err := again.CombinedOutput(); err != nil || !strings.Contains(string(out), "taken over") {
		t.Errorf("the session a killed nested kiln held: %v\n%s", err, out)
	}
}
