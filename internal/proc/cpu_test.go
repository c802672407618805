package proc

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
)

func TestProcessCPUOfAChild(t *testing.T) {
	// The child says when its loop is done, then waits: its CPU time is read while it
	// lives, after it has used some.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo looped; read x")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "looped\n" {
		t.Fatalf("the child said %q, %v", line, err)
	}
	if d, err := ProcessCPU(cmd.Process.Pid); err != nil || d <= 0 {
		t.Errorf("the child's CPU time after its loop: %v, %v; want more than none", d, err)
	}
	if _, err := ProcessCPU(os.Getpid()); err != nil {
		t.Error(err)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("a pid that cannot be: want an error")
	}
}
