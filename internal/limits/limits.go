// Package limits is the one type of a daemon session's limits: how long the session
// may idle, wait for an interrupt, start a worker and call a tool, and what each of
// its cells may use. The daemon, kiln.toml and the daemon's client share it.
package limits

import "fmt"

// Bounds of a session's limits; 0 is none, or the daemon's.
const (
	// MaxMS is the longest any limit in milliseconds may be: 30 days.
	MaxMS = MaxCPUSeconds * 1000
	// MaxCPUSeconds is the most CPU time a cell may be given: 30 days.
	MaxCPUSeconds = 30 * 24 * 3600
	// MinMemoryBytes is the least memory a session may be given: what the worker's
	// interpreter needs to start, with room for a cell.
	MinMemoryBytes = 64 << 20
	// MaxMemoryBytes is the most: 1 TiB.
	MaxMemoryBytes = 1 << 40
	// MinProcesses is the fewest tasks a generation may be held to: the worker's own
	// threads, and a few more.
	MinProcesses = 16
	// MaxProcesses is the most: the kernel's largest pid_max.
	MaxProcesses = 1 << 22
)

// Session bounds a daemon session; a zero field is none, or takes the daemon's. Its
// JSON is the limits of a session the daemon's API and MCP tools take and show; its
// TOML is kiln.toml's [limits] and [sessions.NAME.limits], which bound resources only.
type Session struct {
	IdleTimeoutMS    int64 `json:"idle_timeout_ms,omitzero" toml:"-"`    // stop after this long with nothing running
	InterruptGraceMS int64 `json:"interrupt_grace_ms,omitzero" toml:"-"` // interrupt to hard stop
	StartTimeoutMS   int64 `json:"start_timeout_ms,omitzero" toml:"-"`   // spawn to hello
	ToolTimeoutMS    int64 `json:"tool_timeout_ms,omitzero" toml:"-"`    // one tool call
	// MemoryBytes is each generation's memory: its address space, and under a
	// confining profile its cgroup's; a cell past it gets MemoryError (limit memory).
	MemoryBytes int64 `json:"memory_bytes,omitzero" toml:"memory_bytes"`
	// CPUSeconds is each cell's CPU time; past it the cell gets CPULimitExceeded
	// (limit cpu_seconds).
	CPUSeconds int64 `json:"cpu_seconds,omitzero" toml:"cpu_seconds"`
	// WallMS is each cell's wall clock; past it the cell is interrupted (limit timeout).
	WallMS int64 `json:"wall_ms,omitzero" toml:"wall_ms"`
	// MaxProcesses is the tasks each generation and workspace command may have at once,
	// its cgroup's pids limit (limit max_processes); it needs a confining profile.
	MaxProcesses int64 `json:"max_processes,omitzero" toml:"max_processes"`
}

// field is one limit of a Session: its key, its value and its bounds when not 0.
type field struct {
	key      string
	v        *int64
	min, max int64
}

// fields lists l's limits, in the order they are checked and named.
func (l *Session) fields() []field {
	return []field{
		{"idle_timeout_ms", &l.IdleTimeoutMS, 1, MaxMS}, {"interrupt_grace_ms", &l.InterruptGraceMS, 1, MaxMS},
		{"start_timeout_ms", &l.StartTimeoutMS, 1, MaxMS}, {"tool_timeout_ms", &l.ToolTimeoutMS, 1, MaxMS},
		{"memory_bytes", &l.MemoryBytes, MinMemoryBytes, MaxMemoryBytes}, {"cpu_seconds", &l.CPUSeconds, 1, MaxCPUSeconds},
		{"wall_ms", &l.WallMS, 1, MaxMS}, {"max_processes", &l.MaxProcesses, MinProcesses, MaxProcesses},
	}
}

// resource says whether a key is a limit of what cells use, which a session that
// gives none takes from kiln.toml and the daemon.
func resource(key string) bool {
	return key == "memory_bytes" || key == "cpu_seconds" || key == "wall_ms" || key == "max_processes"
}

// RangeError is a limit out of its bounds.
type RangeError struct {
	Key      string // the limit's key, as "memory_bytes"
	Min, Max int64  // its bounds
	Got      int64
}

// Error names the limit as limits.KEY, with its bounds.
func (e *RangeError) Error() string {
	return fmt.Sprintf("limits.%s must be 0 (none) or %d..%d, got %d", e.Key, e.Min, e.Max, e.Got)
}

// Check returns a *RangeError for the first limit of l out of its bounds.
func (l Session) Check() error {
	for _, f := range l.fields() {
		if *f.v != 0 && (*f.v < f.min || *f.v > f.max) {
			return &RangeError{Key: f.key, Min: f.min, Max: f.max, Got: *f.v}
		}
	}
	return nil
}

// WithDefaults is l with its zero resource limits (memory, CPU, wall clock, processes)
// taken from def; the others are the daemon's own settings and stay.
func (l Session) WithDefaults(def Session) Session {
	defs := def.fields()
	for i, f := range l.fields() {
		if resource(f.key) && *f.v == 0 {
			*f.v = *defs[i].v
		}
	}
	return l
}

// Difference is a limit a request gives otherwise than a session has.
type Difference struct {
	Key         string // the limit's key, as "memory_bytes"
	Held, Asked int64
}

// Differs lists the limits want gives (not zero) that l has otherwise: a session open
// with l cannot be attached to as want asks.
func (l Session) Differs(want Session) []Difference {
	var d []Difference
	have := l.fields()
	for i, w := range want.fields() {
		if *w.v != 0 && *w.v != *have[i].v {
			d = append(d, Difference{Key: w.key, Held: *have[i].v, Asked: *w.v})
		}
	}
	return d
}
