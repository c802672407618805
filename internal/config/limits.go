package config

import (
	"github.com/kilnrt/kiln/internal/sandbox"
)

// Bounds of a session's resource limits; 0 is none.
const (
	// MinMemoryBytes is the least memory a session may be given: what the worker's
	// interpreter needs to start, with room for a cell.
	MinMemoryBytes = 64 << 20
	// MaxMemoryBytes is the most: 1 TiB.
	MaxMemoryBytes = 1 << 40
	// MaxCPUSeconds is the most CPU time a cell may be given: 30 days.
	MaxCPUSeconds = 30 * 24 * 3600
	// MaxWallMS is the longest wall clock a cell may be given: 30 days.
	MaxWallMS = MaxCPUSeconds * 1000
	// MinProcesses is the fewest tasks a generation may be held to: the worker's own
	// threads, and a few more.
	MinProcesses = 16
	// MaxProcesses is the most: the kernel's largest pid_max.
	MaxProcesses = 1 << 22
)

// Sandbox is how a daemon's sessions are confined, [sandbox]; the daemon's --sandbox
// and --network take precedence, and a session's own settings over both.
type Sandbox struct {
	// Profile is workspace, strict or none, the first two optionally ":best-effort".
	Profile string `toml:"profile"`
	// Network is host, none, or TCP ports "80,443".
	Network string `toml:"network"`
}

// Limits bound the cells of a daemon's sessions, [limits] or [sessions.NAME.limits];
// a session's own limits take precedence. 0 is none.
type Limits struct {
	MemoryBytes  int64 `toml:"memory_bytes"`  // each generation's memory
	CPUSeconds   int64 `toml:"cpu_seconds"`   // each cell's CPU time
	WallMS       int64 `toml:"wall_ms"`       // each cell's wall clock
	MaxProcesses int64 `toml:"max_processes"` // tasks at once; needs a confining profile
}

// validateSandbox checks a profile and a network, at the keys of their section at.
func validateSandbox(at, profile, network string) error {
	if _, err := sandbox.ParseProfile(profile); err != nil {
		key := ".sandbox"
		if at == "sandbox" {
			key = ".profile"
		}
		return refuse(at+key, "%v", err)
	}
	if _, err := sandbox.ParseNetwork(network); err != nil {
		return refuse(at+".network", "%v", err)
	}
	return nil
}

// validate checks each limit of l, at the keys of its section at.
func (l Limits) validate(at string) error {
	for _, f := range []struct {
		key      string
		v        int64
		min, max int64
	}{{"memory_bytes", l.MemoryBytes, MinMemoryBytes, MaxMemoryBytes}, {"cpu_seconds", l.CPUSeconds, 1, MaxCPUSeconds},
		{"wall_ms", l.WallMS, 1, MaxWallMS}, {"max_processes", l.MaxProcesses, MinProcesses, MaxProcesses}} {
		if f.v != 0 && (f.v < f.min || f.v > f.max) {
			return refuse(at+"."+f.key, "must be 0 (none) or %d..%d, got %d", f.min, f.max, f.v)
		}
	}
	return nil
}
