package limits

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
		set      func(*Session, int64)
		min, max int64
	}{
		{"idle_timeout_ms", func(l *Session, v int64) { l.IdleTimeoutMS = v }, 1, MaxMS},
		{"interrupt_grace_ms", func(l *Session, v int64) { l.InterruptGraceMS = v }, 1, MaxMS},
		{"start_timeout_ms", func(l *Session, v int64) { l.StartTimeoutMS = v }, 1, MaxMS},
		{"tool_timeout_ms", func(l *Session, v int64) { l.ToolTimeoutMS = v }, 1, MaxMS},
		{"memory_bytes", func(l *Session, v int64) { l.MemoryBytes = v }, MinMemoryBytes, MaxMemoryBytes},
		{"cpu_seconds", func(l *Session, v int64) { l.CPUSeconds = v }, 1, MaxCPUSeconds},
		{"wall_ms", func(l *Session, v int64) { l.WallMS = v }, 1, MaxMS},
		{"max_processes", func(l *Session, v int64) { l.MaxProcesses = v }, MinProcesses, MaxProcesses},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range []int64{0, c.min, c.max} {
				var l Session
				c.set(&l, v)
				if err := l.Check(); err != nil {
					t.Errorf("%d: %v; want it taken", v, err)
				}
			}
			for _, v := range []int64{c.min - 1, c.max + 1, -1} {
				if v == 0 {
					continue // below a minimum of 1 is 0, which is no limit
				}
				var l Session
				c.set(&l, v)
				var re *RangeError
				if err := l.Check(); !errors.As(err, &re) || re.Key != c.name || re.Got != v ||
					!strings.Contains(err.Error(), "limits."+c.name) {
					t.Errorf("%d: %v; want a RangeError naming limits.%s", v, err, c.name)
				}
			}
		})
	}
}

// TestLimitsDefaultsAndDiffers checks that a session's zero resource limits take the
// daemon's, and that a limit given otherwise than a session has is named.
func TestLimitsDefaultsAndDiffers(t *testing.T) {
	def := Session{MemoryBytes: 1 << 30, CPUSeconds: 5, WallMS: 1000, MaxProcesses: 64, IdleTimeoutMS: 9}
	got := Session{CPUSeconds: 2}.WithDefaults(def)
	want := Session{MemoryBytes: 1 << 30, CPUSeconds: 2, WallMS: 1000, MaxProcesses: 64}
	if got != want {
		t.Errorf("defaults: %+v; want %+v (the idle timeout is the daemon's own setting)", got, want)
	}
	if d := want.Differs(Session{CPUSeconds: 2}); len(d) != 0 {
		t.Errorf("the same limits, or none: %+v", d)
	}
	d := want.Differs(Session{MemoryBytes: 100 << 20, IdleTimeoutMS: 5, CPUSeconds: 2})
	if len(d) != 2 || d[0] != (Difference{"idle_timeout_ms", 0, 5}) || d[1] != (Difference{"memory_bytes", 1 << 30, 100 << 20}) {
		t.Errorf("other limits: %+v; want idle_timeout_ms and memory_bytes named", d)
	}
}
