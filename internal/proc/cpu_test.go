package proc

import (
	"os"
	"os/exec"
	"testing"
)

func TestProcessCPUOfAChild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; read x")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	if _, err := ProcessCPU(cmd.Process.Pid); err != nil {
		t.Error(err)
	}
	if _, err := ProcessCPU(os.Getpid()); err != nil {
		t.Error(err)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("a pid that cannot be: want an error")
	}
}
