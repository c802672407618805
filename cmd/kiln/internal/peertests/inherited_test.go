package peertests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestUnconfinedChildrenGetNoInheritedDescriptor: a descriptor the daemon inherited
// from whatever started it (a shell's redirection, here fd 7) reaches none of the
// children it starts under --sandbox none: not a worker, forked or spawned, nor its
// workspace.run command. Nothing is written through it.
func TestUnconfinedChildrenGetNoInheritedDescriptor(t *testing.T) {
	t.Parallel()
	probe := `import os
try:
    os.write(7, b"cell")
    print("written")
except OSError as e:
    print(type(e).__name__)
r = await runtime.workspace.run(["sh", "-c", "echo command >&7 && echo written"])
print(r["stdout"].strip() or r["exit_code"])
`
	for _, start := range []string{"forked", "spawned"} {
		t.Run(start, func(t *testing.T) {
			t.Parallel()
			dir := clitest.ShortTemp(t)
			leak := filepath.Join(t.TempDir(), "leak")
			zygote := "KILN_ZYGOTE="
			if start == "spawned" {
				zygote += "off"
			}
			s := clitest.StartServeCommand(t, []string{"env", zygote, "sh", "-c", `exec "$0" "$@" 7>>` + leak}, dir, "--sandbox", "none")
			s.Call("POST", "/v1/sessions", `{"id":"c"}`, 201, nil)
			if sandbox := sessionSandbox(t, s, "c"); !strings.Contains(sandbox, `"`+start+`"`) {
				t.Skipf("the worker was not %s: %s", start, sandbox)
			}
			if got, want := peerCell(t, s, "c", probe), "OSError\n2\n"; got != want {
				t.Errorf("a cell printed %q; want %q (fd 7 closed in the worker and the command)", got, want)
			}
			if data, err := os.ReadFile(leak); err != nil || len(data) != 0 {
				t.Errorf("the inherited file holds %q (%v); want nothing", data, err)
			}
		})
	}
}
