package worker

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestHostProcsChild prints HostProcs and the runtime's GOMAXPROCS, for TestHostProcs.
func TestHostProcsChild(t *testing.T) {
	if os.Getenv("KILN_HOST_PROCS_CHILD") == "" {
		t.Skip("run by TestHostProcs")
	}
	fmt.Printf("procs %d %d\n", HostProcs(), runtime.GOMAXPROCS(0))
}

// A host takes one fewer than the runtime's own choice, and what the environment says
// when it says it.
func TestHostProcs(t *testing.T) {
	for _, env := range []string{"", "GOMAXPROCS=3", "GOMAXPROCS=1", "GOMAXPROCS=0", "GOMAXPROCS=many"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHostProcsChild$")
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") })
		cmd.Env = append(cmd.Env, "KILN_HOST_PROCS_CHILD=1")
		if env != "" {
			cmd.Env = append(cmd.Env, env)
		}
		out, err := cmd.CombinedOutput()
		var host, runtimeProcs int
		if _, serr := fmt.Sscanf(string(out), "procs %d %d", &host, &runtimeProcs); err != nil || serr != nil {
			t.Fatalf("%q: %v %v\n%s", env, err, serr, out)
		}
		want := max(1, runtimeProcs-1)
		if env == "GOMAXPROCS=3" || env == "GOMAXPROCS=1" { // the others the runtime ignores
			want = runtimeProcs
		}
		if host != want || env == "GOMAXPROCS=3" && runtimeProcs != 3 {
			t.Errorf("%q: HostProcs %d with the runtime's %d; want %d", env, host, runtimeProcs, want)
		}
	}
}
