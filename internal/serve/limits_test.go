package serve

import (
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/limits"
)

// TestConfigDiffers checks that a setting given otherwise than a session has is named,
// its limits too, and that the same settings, or none, are not.
func TestConfigDiffers(t *testing.T) {
	have := Config{Sandbox: "workspace", Network: "none", Limits: limits.Session{CPUSeconds: 2, MemoryBytes: 1 << 30}}
	if d := have.Differs(Config{Sandbox: "workspace", Limits: limits.Session{CPUSeconds: 2}}); len(d) != 0 {
		t.Errorf("the same settings, or none: %q", d)
	}
	d := have.Differs(Config{Sandbox: "strict", Limits: limits.Session{MemoryBytes: 100 << 20}})
	if len(d) != 2 || d[0].String() != `sandbox "workspace", not "strict"` || !strings.HasPrefix(d[1].String(), "limits.memory_bytes 1073741824, not") {
		t.Errorf("other settings: %q; want sandbox and limits.memory_bytes named", d)
	}
}
