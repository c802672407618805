// Package clitest runs the kiln command in tests as a user runs it: a subprocess, a
// daemon on its socket, an HTTP client on that socket. A test package hands its run to
// Main, and its tests start kiln with Command and a daemon with StartServe.
//
// The kiln command's own package runs its test binary as kiln. Every other package that
// uses clitest builds kiln once, before its tests, so that go test runs such packages
// side by side.
package clitest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/leakcheck"
	"github.com/kilnrt/kiln/internal/poll"
	"github.com/kilnrt/kiln/internal/tools/mcptest"
	"github.com/rogpeppe/go-internal/testscript"
)

// ReadyWithin bounds a test's wait for a readiness signal. It is generous: a wait ends
// at the signal, so the bound costs nothing unless the signal never comes, and a loaded
// 2-core machine can take many seconds to start an interpreter.
const ReadyWithin = time.Minute

// mcpServer is the name under which a test binary that runs through Main serves the
// test MCP server on stdio.
const mcpServer = "kiln-test-mcp"

// binary is the path of the kiln that Main built, or "" where the test binary is kiln.
var binary string

// Main runs m's tests and exits, failing the run if they leave goroutines, processes or
// temporary files behind. XDG_DATA_HOME names a temporary directory for the run, so that
// no test's default data directory is the real home's. kiln is the kiln command's main,
// for its own package: the test binary started as kiln runs it. With kiln nil, Main
// builds kiln from this module first, with the race detector if this binary has it.
// Started as kiln-test-mcp, the test binary serves the test MCP server (MCPServer).
func Main(m *testing.M, kiln func()) {
	commands := map[string]func(){mcpServer: mcptest.ServeStdio}
	if kiln != nil {
		commands["kiln"] = kiln
	}
	testscript.Main(leakcheck.Wrap(run{m, kiln == nil}), commands)
}

// run is a package's run of its tests, in a temporary directory of its own.
type run struct {
	m     *testing.M
	build bool // kiln is built into the directory first
}

func (r run) Run() int {
	dir, err := os.MkdirTemp("", "kiln-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "clitest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "clitest: %v\n", err)
		return 1
	}
	os.Setenv("XDG_DATA_HOME", data)
	if r.build {
		bin := filepath.Join(dir, "kiln")
		args := []string{"build", "-o", bin}
		if race {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/kilnrt/kiln/cmd/kiln")...).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "clitest: building kiln: %v\n%s", err, out)
			return 1
		}
		binary = bin
	}
	return r.m.Run()
}

// Command returns a command that runs kiln with args.
func Command(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	if binary != "" {
		return exec.Command(binary, args...)
	}
	return exec.Command(self(t, "kiln"), args...)
}

// MCPServer is the path of a command that serves the test MCP server on stdio.
func MCPServer(t testing.TB) string {
	t.Helper()
	return self(t, mcpServer)
}

// self is the path of a link to this test binary named name, in a temporary directory
// of t's: started by that name, the binary runs Main's command of that name.
func self(t testing.TB, name string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(exe, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Out runs kiln with args in a subprocess and returns its stdout, failing the test
// unless it exits 0.
func Out(t testing.TB, args ...string) string {
	t.Helper()
	cmd := Command(t, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kiln %q: %v\nstdout %s\nstderr %s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// ShortTemp is a temporary directory with a path short enough for a Unix socket.
func ShortTemp(t testing.TB) string {
	dir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// WaitForChild returns the pid of the first child of pid.
func WaitForChild(t testing.TB, pid int) int {
	t.Helper()
	child := 0
	poll.Until(t, ReadyWithin, func() bool {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
		for _, f := range tasks {
			data, _ := os.ReadFile(f)
			if fields := strings.Fields(string(data)); len(fields) > 0 {
				child, _ = strconv.Atoi(fields[0])
				return true
			}
		}
		return false
	})
	return child
}

// ProcessExists reports whether pid is a live (not zombie) process.
func ProcessExists(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// Descendants are the processes below pid, from /proc.
func Descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(p) + "/task/*/children")
		for _, f := range tasks {
			data, _ := os.ReadFile(f)
			for _, field := range strings.Fields(string(data)) {
				child, _ := strconv.Atoi(field)
				out = append(out, child)
				queue = append(queue, child)
			}
		}
	}
	return out
}

// GoneWithin fails t unless every process with the argument marker has ended within
// timeout, naming those left and what they outlived.
func GoneWithin(t testing.TB, timeout time.Duration, marker, what string) {
	t.Helper()
	if !poll.Wait(timeout, func() bool { return len(leakcheck.WithArg(marker)) == 0 }) {
		t.Fatalf("processes %v outlived %s by %v", leakcheck.WithArg(marker), what, timeout)
	}
}

// ExpectLine reads the next line of r and fails t unless it is want, spaces around it
// aside, or if none comes within ReadyWithin.
func ExpectLine(t testing.TB, r *bufio.Reader, want string) {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		done <- line
	}()
	select {
	case line := <-done:
		if strings.TrimSpace(line) != want {
			t.Fatalf("got line %q; want %q", line, want)
		}
	case <-time.After(ReadyWithin):
		t.Fatalf("no line %q within %v", want, ReadyWithin)
	}
}

// RSS is the resident set of pid in KiB.
func RSS(b testing.TB, pid int) int { return ProcStatus(b, pid, "VmRSS:") }

// ProcStatus is the number of field (with its colon) in pid's /proc status, a size in
// KiB or a count.
func ProcStatus(b testing.TB, pid int, field string) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// WriteFile writes text to the file path.
func WriteFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WriteConfig writes dir's kiln.toml.
func WriteConfig(t testing.TB, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
