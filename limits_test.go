package kiln_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/bombtest"
)

// TestAForkBombStopsAtMaxProcesses forks past a workbench's MaxProcesses under
// workspace: the fork is refused and the cell's record names the limit; a workbench
// that forks fewer runs on. Under none, which makes no cgroup to count the tasks in,
// the limit is refused at the open.
func TestAForkBombStopsAtMaxProcesses(t *testing.T) {
	t.Parallel()
	const processes = 32
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: t.TempDir(), Workspace: t.TempDir(),
		Sandbox: kiln.SandboxWorkspace, MaxProcesses: processes})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	rec, err := wb.Execute(context.Background(), bombtest.Fork(processes+8))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != kiln.StatusError || rec.Limit != kiln.LimitProcesses {
		t.Errorf("a fork bomb: %s, limit %q, %v; want error, limit max_processes", rec.Status, rec.Limit, rec.Exception)
	}
	rec, err = wb.Execute(context.Background(), bombtest.Fork(4))
	if err != nil || rec.Status != kiln.StatusOK || rec.Limit != "" || rec.NamespaceLost {
		t.Errorf("4 forks after the bomb: %v %s, limit %q, %v; want ok, the namespace kept", err, rec.Status, rec.Limit, rec.Exception)
	}

	_, err = kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: t.TempDir(), Workspace: t.TempDir(),
		Sandbox: kiln.SandboxNone, MaxProcesses: processes})
	if !errors.Is(err, kiln.ErrLimitUnavailable) {
		t.Errorf("MaxProcesses under none: %v; want ErrLimitUnavailable", err)
	}
	_, err = kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: t.TempDir(), Workspace: t.TempDir(),
		Sandbox: kiln.SandboxNone, MemoryBytes: -1})
	if !errors.Is(err, kiln.ErrLimitUnavailable) {
		t.Errorf("MemoryBytes -1: %v; want ErrLimitUnavailable", err)
	}
}
