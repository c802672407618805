package main

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// TestExecPrintsOutputAsItComes holds the cell until the test has read, from kiln exec's
// stdout, the line the cell printed before it waits: the line came while the cell ran.
// The release file is in the workspace, which a confined cell sees as the test does.
func TestExecPrintsOutputAsItComes(t *testing.T) {
	workspace := t.TempDir()
	release := filepath.Join(workspace, "release")
	for _, asJSON := range []bool{false, true} {
		args := []string{"exec", "--workspace", workspace}
		if asJSON {
			args = append(args, "--json", "--stream")
		}
		cmd := clitest.Command(t, append(args, "import os, time\nprint('ready')\nwhile not os.path.exists("+
			pyString(release)+"):\n    time.sleep(0.01)\nprint('after')")...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		if asJSON {
			clitest.ExpectLine(t, r, `{"event":"output","id":"c-1","stream":"stdout","text":"ready\n"}`)
		} else {
			clitest.ExpectLine(t, r, "ready")
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if !asJSON {
			clitest.ExpectLine(t, r, "after")
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		os.Remove(release)
	}
}

// pyString is s as a Python string literal.
func pyString(s string) string { return "r'" + s + "'" }
