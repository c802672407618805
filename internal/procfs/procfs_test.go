package procfs

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// TestSelfIsWhatProcNames: /proc/<Self()> is this process, whatever its pid in its own
// namespace.
func TestSelfIsWhatProcNames(t *testing.T) {
	mine, err := os.Readlink("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if got := strconv.Itoa(Self()); got != mine || !Alive(Self()) {
		t.Errorf("Self() = %s, alive %v; want /proc/self's %s, alive", got, Alive(Self()), mine)
	}
}

// TestAZombieIsNotAlive: a child is alive until it exits; exited and not yet reaped, a
// zombie, it is dead; reaped, it is gone.
func TestAZombieIsNotAlive(t *testing.T) {
	cmd := exec.Command("cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Errorf("a running child is not alive")
	}
	in.Close() // cat exits at the end of its input
	// Readiness: the child's state turns Z once it has exited; it stays so until reaped.
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if state, _ := State(stat); state == 'Z' {
			break
		}
	}
	if Alive(pid) {
		t.Errorf("a zombie is alive")
	}
	cmd.Wait()
	if Alive(pid) {
		t.Errorf("a reaped child is alive")
	}
}

func TestState(t *testing.T) {
	for _, c := range []struct {
		stat string
		want byte
		ok   bool
	}{
		{"12 (sh) S 1 12", 'S', true},
		{"12 (a) b) (c) Z 1 12", 'Z', true},
		{"12 (sh)", 0, false},
		{"12 sh S", 0, false},
	} {
		if got, ok := State([]byte(c.stat)); got != c.want || ok != c.ok {
			t.Errorf("State(%q) = %q, %v; want %q, %v", c.stat, got, ok, c.want, c.ok)
		}
	}
}
