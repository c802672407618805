package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/limits"
)

// TestSandboxAndLimits: [sandbox] and [limits] confine and bound every session, and
// [sessions.NAME] one; each limit is taken at its bounds and refused one past, and a
// profile or network kiln does not know is refused, each naming file, line and key.
func TestSandboxAndLimits(t *testing.T) {
	text := "[sandbox]\nprofile = \"workspace:best-effort\"\nnetwork = \"443\"\n[limits]\nmemory_bytes = 67108864\ncpu_seconds = 2592000\n" +
		"[sessions.build]\nsandbox = \"strict\"\nnetwork = \"none\"\nlimits = { max_processes = 4194304, wall_ms = 1 }\n"
	cfg, err := Parse("kiln.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox != (Sandbox{Profile: "workspace:best-effort", Network: "443"}) ||
		cfg.Limits != (limits.Session{MemoryBytes: limits.MinMemoryBytes, CPUSeconds: limits.MaxCPUSeconds}) {
		t.Errorf("[sandbox] %+v, [limits] %+v", cfg.Sandbox, cfg.Limits)
	}
	if s := cfg.Sessions["build"]; s.Sandbox != "strict" || s.Network != "none" || s.Limits != (limits.Session{MaxProcesses: limits.MaxProcesses, WallMS: 1}) {
		t.Errorf("[sessions.build] %+v", s)
	}
	for _, tc := range []struct{ text, want string }{
		{"[sandbox]\nprofile = \"jail\"\n", `kiln.toml:2: sandbox.profile: sandbox: unknown profile: "jail"`},
		{"[sandbox]\nnetwork = \"http\"\n", "kiln.toml:2: sandbox.network:"},
		{"[sessions.x]\nsandbox = \"none:best-effort\"\n", "kiln.toml:2: sessions.x.sandbox:"},
		{fmt.Sprintf("[limits]\nmemory_bytes = %d\n", limits.MinMemoryBytes-1), "kiln.toml:2: limits.memory_bytes: must be 0 (none) or"},
		{fmt.Sprintf("[limits]\nmemory_bytes = %d\n", limits.MaxMemoryBytes+1), "limits.memory_bytes"},
		{fmt.Sprintf("[limits]\ncpu_seconds = %d\n", limits.MaxCPUSeconds+1), "limits.cpu_seconds"},
		{"[limits]\nwall_ms = -1\n", "limits.wall_ms"},
		{fmt.Sprintf("[sessions.x.limits]\nmax_processes = %d\n", limits.MinProcesses-1), "sessions.x.limits.max_processes"},
		{fmt.Sprintf("[sessions.x]\nlimits = { max_processes = %d }\n", limits.MaxProcesses+1), "sessions.x.limits.max_processes"},
		{"[limits]\nmemory = 1\n", "limits.memory: unknown key"},
		{"[limits]\nidle_timeout_ms = 5\n", "limits.idle_timeout_ms: unknown key"}, // the daemon's own, not kiln.toml's
	} {
		_, err := Parse("kiln.toml", []byte(tc.text))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.text, err, tc.want)
		}
	}
}
