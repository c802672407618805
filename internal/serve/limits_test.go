package serve

import (
	"errors"
	"strings"
	"testing"
)

// TestLimitsAtTheirBounds checks each of a session's limits at its bounds, where it is
// taken, and one past each, where it is refused naming the limit.
func TestLimitsAtTheirBounds(t *testing.T) {
	for _, c := range []struct {
		name     string
		set      func(*Limits, int64)
		min, max int64
	}{
		{"idle_timeout_ms", func(l *Limits, v int64) { l.IdleTimeoutMS = v }, 1, MaxLimitMS},
		{"interrupt_grace_ms", func(l *Limits, v int64) { l.InterruptGraceMS = v }, 1, MaxLimitMS},
		{"start_timeout_ms", func(l *Limits, v int64) { l.StartTimeoutMS = v }, 1, MaxLimitMS},
		{"tool_timeout_ms", func(l *Limits, v int64) { l.ToolTimeoutMS = v }, 1, MaxLimitMS},
		{"memory_bytes", func(l *Limits, v int64) { l.MemoryBytes = v }, MinMemoryBytes, MaxMemoryBytes},
		{"cpu_seconds", func(l *Limits, v int64) { l.CPUSeconds = v }, 1, MaxCPUSeconds},
		{"wall_ms", func(l *Limits, v int64) { l.WallMS = v }, 1, MaxLimitMS},
		{"max_processes", func(l *Limits, v int64) { l.MaxProcesses = v }, MinProcesses, MaxProcesses},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range []int64{0, c.min, c.max} {
				var l Limits
				c.set(&l, v)
				if err := l.check(); err != nil {
					t.Errorf("%d: %v; want it taken", v, err)
				}
			}
			for _, v := range []int64{c.min - 1, c.max + 1, -1} {
				if v == 0 {
					continue // below a minimum of 1 is 0, which is no limit
				}
				var l Limits
				c.set(&l, v)
				err := l.check()
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "limits."+c.name) {
					t.Errorf("%d: %v; want ErrInvalid naming limits.%s", v, err, c.name)
				}
			}
		})
	}
}

// TestLimitsDefaultsAndDiffers checks that a session's zero resource limits take the
// daemon's, and that a setting given otherwise than a session has is named.
func TestLimitsDefaultsAndDiffers(t *testing.T) {
	def := Limits{MemoryBytes: 1 << 30, CPUSeconds: 5, WallMS: 1000, MaxProcesses: 64, IdleTimeoutMS: 9}
	got := Limits{CPUSeconds: 2}.withDefaults(def)
	want := Limits{MemoryBytes: 1 << 30, CPUSeconds: 2, WallMS: 1000, MaxProcesses: 64}
	if got != want {
		t.Errorf("defaults: %+v; want %+v (the idle timeout is the daemon's own setting)", got, want)
	}
	have := Config{Sandbox: "workspace", Network: "none", Limits: want}
	if d := have.Differs(Config{Sandbox: "workspace", Limits: Limits{CPUSeconds: 2}}); len(d) != 0 {
		t.Errorf("the same settings, or none: %q", d)
	}
	d := have.Differs(Config{Sandbox: "strict", Limits: Limits{MemoryBytes: 100 << 20}})
	if len(d) != 2 || !strings.HasPrefix(d[0], `sandbox "strict"`) || !strings.HasPrefix(d[1], "limits.memory_bytes 104857600") {
		t.Errorf("other settings: %q; want sandbox and limits.memory_bytes named", d)
	}
}
