package proc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// threads is the number of this process's threads, from /proc.
func threads(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads in /proc/self/status")
	return 0
}

// Adopted children are waited for in the runtime's poller: supervising many holds no
// thread for each, and each is still seen to exit and reaped, with its status.
func TestAdoptedChildrenHoldNoThreads(t *testing.T) {
	const n = 48
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	before := threads(t)
	var kids []*Process
	defer func() {
		for _, p := range kids {
			p.Kill()
			<-p.Exited()
		}
	}()
	for range n {
		h, err := NewHandoff(Command{})
		if err != nil {
			t.Fatal(err)
		}
		var fds []uintptr
		for _, f := range h.Files() {
			fds = append(fds, f.Fd())
		}
		pid, err := syscall.ForkExec(sleep, []string{sleep, "600"}, &syscall.ProcAttr{
			Files: fds, Sys: &syscall.SysProcAttr{Setpgid: true}})
		if err != nil {
			h.Close()
			t.Fatal(err)
		}
		p, err := h.Adopt(pid, false)
		h.Close()
		if err != nil {
			syscall.Kill(pid, syscall.SIGKILL)
			syscall.Wait4(pid, nil, 0, nil)
			t.Fatal(err)
		}
		kids = append(kids, p)
	}
	if grown := threads(t) - before; grown >= n/2 {
		t.Errorf("%d threads more for %d adopted children; want far fewer than one each", grown, n)
	}
	for _, p := range kids {
		p.Kill()
	}
	for _, p := range kids {
		<-p.Exited()
		if p.State() == nil || p.State().Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("pid %d ended %v; want killed", p.Pid(), p.State())
		}
	}
	kids = nil
}
