package workspace_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/workspace"
)

// open starts a workbench whose workspace is a fresh directory holding sub/ and a
// symlink out of it.
func open(t *testing.T) (*kiln.Workbench, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "ws")
	os.MkdirAll(filepath.Join(root, "sub", "deeper"), 0o755)
	os.Symlink(t.TempDir(), filepath.Join(root, "out"))
	os.Symlink("sub", filepath.Join(root, "in"))
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{Workspace: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	return wb, root
}

// cell runs code and returns its result text, failing on any status but ok.
func cell(t *testing.T, wb *kiln.Workbench, code string) string {
	t.Helper()
	rec, err := wb.Execute(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kiln.StatusOK {
		t.Fatalf("%s: %s %v", code, rec.Status, *rec.Error)
	}
	var out []string
	for _, o := range rec.Output {
		out = append(out, o.Text)
	}
	return strings.Join(out, "")
}

// prelude defines run; its commands run the cell's own interpreter (sys.executable),
// which a confined command reaches where a python3 on PATH (a pyenv shim in the
// hidden home, say) may not be.
const prelude = `import sys
from kiln.runtime import HostError
async def run(*argv, **kw):
    try:
        return await runtime.workspace.run(list(argv), **kw)
    except HostError as e:
        return e.code + ": " + e.message
`

func TestInfo(t *testing.T) {
	wb, root := open(t)
	got := cell(t, wb, `i = await runtime.workspace.info()
i["root"], i["default_max_output_bytes"]`)
	if want := "('" + root + "', 750000)"; got != want {
		t.Errorf("got %s; want %s", got, want)
	}
}

func TestOutputIsBoundedWithExactCounts(t *testing.T) {
	wb, _ := open(t)
	cell(t, wb, prelude)
	for _, c := range []struct{ name, code, want string }{
		{"10 MB, 1000 kept", `r = await run(sys.executable, "-c", "import sys; sys.stdout.write('x' * 10_000_000); sys.stderr.write('e' * 10)", max_output_bytes=1000)
len(r["stdout"]), r["stdout_truncated_bytes"], r["stdout_bytes"], r["stderr"], r["stderr_truncated_bytes"], r["exit_code"]`,
			"(1000, 9999000, 10000000, '', 10, 0)"},
		{"10 MB, default budget", `r = await run(sys.executable, "-c", "import sys; sys.stdout.write('x' * 10_000_000)")
len(r["stdout"]), r["stdout_truncated_bytes"]`, "(750000, 9250000)"},
		{"at the largest budget", `r = await run("true", max_output_bytes=750000)
r["exit_code"]`, "0"},
		{"one past it", `await run("true", max_output_bytes=750001)`, "'invalid_request: max_output_bytes must be 0..750000'"},
		{"escapes that would overflow a frame", `r = await run(sys.executable, "-c", "import sys; sys.stdout.buffer.write(bytes([1]) * 700_000)")
len(r["stdout"]) < 700_000, len(r["stdout"].encode()) + r["stdout_truncated_bytes"] == r["stdout_bytes"] == 700_000`, "(True, True)"},
		{"a character cut at the budget", `r = await run(sys.executable, "-c", "print('é' * 10, end='')", max_output_bytes=5)
r["stdout"], r["stdout_truncated_bytes"]`, "('éé', 16)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := cell(t, wb, c.code); got != c.want {
				t.Errorf("got %s; want %s", got, c.want)
			}
		})
	}
}

func TestACommandIgnoringSIGTERMIsKilledAtItsTimeout(t *testing.T) {
	wb, _ := open(t)
	cell(t, wb, prelude)
	got := cell(t, wb, `r = await run("sh", "-c", "trap '' TERM; sleep 30 & wait; sleep 30", timeout_ms=300)
r["timed_out"], r["signal"], r["exit_code"]`)
	if want := "(True, 'SIGKILL', None)"; got != want {
		t.Errorf("got %s; want %s", got, want)
	}
}

func TestCwdStaysInTheWorkspace(t *testing.T) {
	wb, root := open(t)
	cell(t, wb, prelude)
	for _, c := range []struct{ cwd, want string }{
		{"sub/deeper", "'" + root + "/sub/deeper'"},
		{"in/deeper", "'" + root + "/sub/deeper'"},
		{root + "/sub", "'" + root + "/sub'"},
		{"../..", "invalid_request"},
		{"sub/../..", "invalid_request"},
		{"out", "invalid_request"},
		{"/tmp", "invalid_request"},
		{"missing", "invalid_request"},
	} {
		t.Run(c.cwd, func(t *testing.T) {
			got := cell(t, wb, `r = await run("pwd", "-P", cwd=`+pyString(c.cwd)+`)
r if isinstance(r, str) else r["stdout"].strip()`)
			if !strings.HasPrefix(got, c.want) && !strings.HasPrefix(got, "'"+strings.Trim(c.want, "'")) {
				t.Errorf("cwd %q: got %s; want %s", c.cwd, got, c.want)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	wb, _ := open(t)
	cell(t, wb, prelude)
	for _, code := range []string{
		`await runtime.request("workspace.run")`,
		`await runtime.request("workspace.run", argv=[])`,
		`await runtime.request("workspace.run", argv="ls")`,
		`await run("true", timeout_ms=0)`,
		`await run("true", env={"A=B": "x"})`,
		`await runtime.request("workspace.run", argv=["true"], bogus=1)`,
	} {
		got := cell(t, wb, "try:\n    r = "+code+"\nexcept HostError as e:\n    r = e.code\nr")
		if !strings.Contains(got, "invalid_request") {
			t.Errorf("%s: got %s; want invalid_request", code, got)
		}
	}
	if got := cell(t, wb, `(await run("no-such-command-anywhere"))["exit_code"]`); got != "127" {
		t.Errorf("a command that cannot start: %s", got)
	}
	_ = workspace.MaxOutputBytes
}

func pyString(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

// TestCommandsTakeTheMemoryLimitUnconfined: under the profile that confines nothing,
// which makes no cgroup, a command still runs within the workbench's memory limit, as
// the address space of it and of each process it starts; none is left unbounded.
func TestCommandsTakeTheMemoryLimitUnconfined(t *testing.T) {
	root := t.TempDir()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{Workspace: root, Sandbox: "none", MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wb.Close() })
	cell(t, wb, prelude)
	for _, c := range []struct{ name, code, want string }{
		{"its limit", `r = await run(sys.executable, "-c", "import resource; print(*resource.getrlimit(resource.RLIMIT_AS))")
r["stdout"], r["exit_code"]`, `('268435456 268435456\n', 0)`},
		{"a bomb", `r = await run("sh", "-c", sys.executable + " -c 'bytearray(1 << 30)'")
"MemoryError" in r["stderr"], r["exit_code"]`, "(True, 1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := cell(t, wb, c.code); got != c.want {
				t.Errorf("got %s; want %s", got, c.want)
			}
		})
	}
}
