package frontier_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/frontier"
)

// A session with no model route has no agent to fold it: frontier.select is refused
// no_route, naming what to configure, and nothing is scheduled.
func TestASessionWithNoRouteIsRefused(t *testing.T) {
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{DataDir: t.TempDir(), Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	rec, err := wb.Execute(context.Background(), `async def attempt(**params):
    try:
        return await runtime.request("frontier.select", **params)
    except runtime.HostError as e:
        return e.code + ": " + str(e)
print(await attempt())
print(await attempt(now=True))`)
	if err != nil || rec.Status != kiln.StatusOK || len(rec.Output) != 1 {
		t.Fatalf("%+v %v", rec, err)
	}
	lines := strings.Split(strings.TrimSpace(rec.Output[0].Text), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], frontier.CodeNoRoute+": ") || !strings.Contains(lines[0], "[agent]") ||
		!strings.HasPrefix(lines[1], "invalid_request: ") {
		t.Errorf("%q; want no_route naming [agent], then invalid_request", lines)
	}
}
