package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	kilndaemon "github.com/kilnrt/kiln/daemon"
	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/bombtest"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/serve"
)

// limited is what the tests read of a cell a limit may have stopped.
type limited struct {
	Status string `json:"status"`
	Limit  string `json:"limit"`
}

// TestSessionLimitsStopCells opens sessions, each with one limit, on a daemon that
// confines nothing, and runs a cell past it: each is stopped, its record naming the
// limit. The session of the processes limit asks for workspace, which the daemon
// applies to it alone, and its description says so: its workbench, forked from the
// daemon's zygote, under the profile it asked.
func TestSessionLimitsStopCells(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	for _, c := range []struct {
		id      string
		body    map[string]any
		code    string
		status  string
		limit   string
		profile string
	}{
		{"memory", map[string]any{"limits": map[string]any{"memory_bytes": 256 << 20}}, bombtest.Memory, "error", "memory", "none"},
		{"cpu", map[string]any{"limits": map[string]any{"cpu_seconds": 1}}, bombtest.Busy, "error", "cpu_seconds", "none"},
		{"wall", map[string]any{"limits": map[string]any{"wall_ms": 500}}, bombtest.Sleep, "interrupted", "timeout", "none"},
		{"pids", map[string]any{"sandbox": "workspace", "limits": map[string]any{"max_processes": 32}}, bombtest.Fork(40), "error", "max_processes", "workspace"},
	} {
		t.Run(c.id, func(t *testing.T) {
			c.body["id"] = c.id
			resp, data := d.do("POST", "/v1/sessions", c.body)
			d.want(resp, data, http.StatusCreated, nil)
			resp, data = d.do("POST", "/v1/sessions/"+c.id+"/executions", map[string]any{"code": c.code, "wait_ms": 60000})
			var rec limited
			d.want(resp, data, http.StatusOK, &rec)
			if rec.Status != c.status || rec.Limit != c.limit {
				t.Errorf("the bomb: %.400s; want %s, limit %s", data, c.status, c.limit)
			}
			resp, data = d.do("GET", "/v1/sessions/"+c.id, nil)
			var info serve.Info
			d.want(resp, data, http.StatusOK, &info)
			if info.Sandbox == nil || info.Sandbox.Profile != c.profile || info.Sandbox.Start != "forked" {
				t.Errorf("the session's sandbox: %.600s; want profile %s, its workbench forked", data, c.profile)
			}
			if c.profile == "workspace" && (info.Config.Sandbox != "workspace" || info.Sandbox.Processes != 32 || !info.Sandbox.Seccomp) {
				t.Errorf("the confined session: %.600s; want its config's sandbox, and what applied: max_processes 32, seccomp", data)
			}
		})
	}
}

// TestSessionSettingsRefused checks that a sandbox, network or limit a session cannot
// be given is refused, naming it: one kiln does not know, one out of its bounds, and
// one the host cannot apply.
func TestSessionSettingsRefused(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	for _, c := range []struct {
		name, body string
		status     int
		code, says string
	}{
		{"unknown profile", `{"id":"a","sandbox":"jail"}`, 400, api.CodeInvalid, "sandbox"},
		{"best-effort none", `{"id":"a","sandbox":"none:best-effort"}`, 400, api.CodeInvalid, "sandbox"},
		{"bad network", `{"id":"a","network":"80,http"}`, 400, api.CodeInvalid, "network"},
		{"port 0", `{"id":"a","network":"0"}`, 400, api.CodeInvalid, "network"},
		{"strict with ports", `{"id":"a","sandbox":"strict","network":"443"}`, 400, api.CodeInvalid, "strict allows no network"},
		{"processes unconfined", `{"id":"a","sandbox":"none","limits":{"max_processes":32}}`, 422, api.CodeCannotApply, "max_processes 32 needs a confining sandbox"},
		{"unknown limit", `{"id":"a","limits":{"memory":1}}`, 400, api.CodeUnknownField, "/limits/memory"},
		{"negative memory", `{"id":"a","limits":{"memory_bytes":-1}}`, 400, api.CodeInvalid, "limits.memory_bytes"},
		{"memory one below", fmt.Sprintf(`{"id":"a","limits":{"memory_bytes":%d}}`, limits.MinMemoryBytes-1), 400, api.CodeInvalid, "limits.memory_bytes"},
		{"memory one past", fmt.Sprintf(`{"id":"a","limits":{"memory_bytes":%d}}`, limits.MaxMemoryBytes+1), 400, api.CodeInvalid, "limits.memory_bytes"},
		{"memory overflows", `{"id":"a","limits":{"memory_bytes":9223372036854775808}}`, 400, api.CodeInvalid, "memory_bytes"},
		{"memory not whole", `{"id":"a","limits":{"memory_bytes":1.5e8}}`, 400, api.CodeInvalid, "memory_bytes"},
		{"zero cpu is none, negative", `{"id":"a","limits":{"cpu_seconds":-1}}`, 400, api.CodeInvalid, "limits.cpu_seconds"},
		{"cpu one past", fmt.Sprintf(`{"id":"a","limits":{"cpu_seconds":%d}}`, limits.MaxCPUSeconds+1), 400, api.CodeInvalid, "limits.cpu_seconds"},
		{"wall one past", fmt.Sprintf(`{"id":"a","limits":{"wall_ms":%d}}`, limits.MaxMS+1), 400, api.CodeInvalid, "limits.wall_ms"},
		{"processes one below", fmt.Sprintf(`{"id":"a","limits":{"max_processes":%d}}`, limits.MinProcesses-1), 400, api.CodeInvalid, "limits.max_processes"},
		{"processes one past", fmt.Sprintf(`{"id":"a","limits":{"max_processes":%d}}`, limits.MaxProcesses+1), 400, api.CodeInvalid, "limits.max_processes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, data := d.do("POST", "/v1/sessions", c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d; want %d; body %.400s", resp.StatusCode, c.status, data)
			}
			wantCode(t, data, c.code)
			if !strings.Contains(string(data), c.says) {
				t.Errorf("%.400s; want it to name %q", data, c.says)
			}
		})
	}
	// At the bounds a session opens: the least memory, the most of the others.
	body := fmt.Sprintf(`{"id":"bounds","sandbox":"workspace","limits":{"memory_bytes":%d,"cpu_seconds":%d,"wall_ms":%d,"max_processes":%d}}`,
		limits.MinMemoryBytes, limits.MaxCPUSeconds, limits.MaxMS, limits.MaxProcesses)
	resp, data := d.do("POST", "/v1/sessions", body)
	d.want(resp, data, http.StatusCreated, nil)
	if _, rec := d.execute("bounds", "6 * 7", 60000); result(rec) != "42" {
		t.Errorf("a cell at the bounds: %+v", rec)
	}
}

// TestWorkspaceCommandsTakeTheSessionsLimits runs, from a cell of a confined session
// with a processes and a memory limit, a workspace command past each: the fork bomb's
// fork is refused, and the memory bomb is stopped by its cgroup.
func TestWorkspaceCommandsTakeTheSessionsLimits(t *testing.T) {
	d := startDaemon(t, kilndaemon.Options{})
	resp, data := d.do("POST", "/v1/sessions", map[string]any{"id": "run", "sandbox": "workspace",
		"limits": map[string]any{"max_processes": 32, "memory_bytes": 128 << 20}})
	d.want(resp, data, http.StatusCreated, nil)
	cell := fmt.Sprintf(`import sys
fork = await runtime.workspace.run([sys.executable, "-c", %q])
mem = await runtime.workspace.run([sys.executable, "-c", "b = b'x' * (512 << 20)"])
print("BlockingIOError" in fork["stderr"], fork["exit_code"] != 0, mem["exit_code"] != 0)`, bombtest.Fork(40))
	_, rec := d.execute("run", cell, 60000)
	if out, _ := rec.streams(); out != "True True True\n" {
		t.Errorf("workspace commands past the session's limits: %q, %+v; want the fork refused and the memory bomb stopped", out, rec)
	}
}
