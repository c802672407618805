package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
)

// TestProgramProcessesEndWithTheirHost: kiln run killed with SIGKILL takes with it the
// processes its program started in its process group, under each profile: a child, and
// an orphan whose parent exited.
func TestProgramProcessesEndWithTheirHost(t *testing.T) {
	for _, profile := range []string{"none", "workspace"} {
		t.Run(profile, func(t *testing.T) {
			marker := fmt.Sprintf("%d.%09d", 6000+rand.IntN(1000), rand.IntN(1_000_000_000))
			t.Cleanup(func() {
				for _, pid := range leakcheck.WithArg(marker) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			dir := t.TempDir()
			program := fmt.Sprintf(`import os, subprocess, time
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
subprocess.Popen(["sleep", %[1]q], **quiet)
subprocess.run(["sh", "-c", "sleep %[1]s </dev/null >/dev/null 2>&1 &"])
time.sleep(600)
`, marker)
			os.WriteFile(filepath.Join(dir, "p.py"), []byte(program), 0o600)
			cmd := clitest.Command(t, "run", "--sandbox", profile, "--python", debianPython, "p.py")
			cmd.Dir = dir
			var output strings.Builder
			cmd.Stdout, cmd.Stderr = &output, &output
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
			})
			if !poll.Wait(60*time.Second, func() bool { return len(leakcheck.WithArg(marker)) >= 2 }) {
				t.Fatalf("%d of 2 sleepers started; kiln run: %s", len(leakcheck.WithArg(marker)), output.String())
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			clitest.GoneWithin(t, 10*time.Second, marker, "kiln run's SIGKILL")
		})
	}
}
