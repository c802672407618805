package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
)

// TestWorkspaceRunProcessesEndWithTheirCommand: a process a workspace.run command starts
// out of its group's reach (setsid) ends when the command does, and a command still
// running ends with its host, killed with SIGKILL, its escaped children with it.
func TestWorkspaceRunProcessesEndWithTheirCommand(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("%d.%09d", 5000+rand.IntN(1000), rand.IntN(1_000_000_000))
	t.Cleanup(func() {
		for _, pid := range leakcheck.WithArg(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// Popen returns once the sleeper runs, in a session of its own.
	escape := fmt.Sprintf(debianPython+" -c 'import subprocess; subprocess.Popen([\"sleep\", \"%s\"], start_new_session=True, "+
		"stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)';", marker)

	// A normal exit of the command.
	out := clitest.Out(t, "exec", "--data", t.TempDir(), "--workspace", t.TempDir(), "--python", debianPython,
		fmt.Sprintf("r = await runtime.workspace.run(['sh', '-c', %q])\nr['exit_code']", escape))
	if out != "0\n" {
		t.Fatalf("the command: %q; want exit code 0", out)
	}
	clitest.GoneWithin(t, 10*time.Second, marker, "their command's exit")

	// The host killed while the command runs.
	cmd := clitest.Command(t, "exec", "--data", t.TempDir(), "--workspace", t.TempDir(), "--python", debianPython,
		fmt.Sprintf("await runtime.workspace.run(['sh', '-c', %q], timeout_ms=100000)", escape+" sleep "+marker))
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !poll.Wait(30*time.Second, func() bool { return len(leakcheck.WithArg(marker)) >= 2 }) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%d of 2 sleepers started; kiln exec: %s", len(leakcheck.WithArg(marker)), output.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	clitest.GoneWithin(t, 10*time.Second, marker, "their host")
}
