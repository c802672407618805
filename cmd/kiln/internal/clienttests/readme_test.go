package clienttests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
)

// readmeBlock is a fenced block of the README that it shows as runnable: sh or bash,
// with no "$ " prompt (a block with prompts shows a session, its output among it), or
// python.
type readmeBlock struct {
	line int    // of its opening fence
	lang string // sh, bash or python
	text string
}

// runnableBlocks returns the README's runnable blocks.
func runnableBlocks(readme string) []readmeBlock {
	var blocks []readmeBlock
	var cur *readmeBlock
	for i, line := range strings.Split(readme, "\n") {
		switch {
		case cur == nil && (line == "```sh" || line == "```bash" || line == "```python"):
			cur = &readmeBlock{line: i + 1, lang: strings.TrimPrefix(line, "```")}
		case cur != nil && line == "```":
			if !strings.HasPrefix(cur.text, "$ ") {
				blocks = append(blocks, *cur)
			}
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	return blocks
}

// TestREADMEBlocksRun runs each block the README shows as runnable, as printed, in bash
// with -euo pipefail, in a directory and a data directory of its own, with kiln on PATH;
// a Python block runs with the Python client, against a daemon on that data directory.
// The block that builds kiln and runs the whole suite is .ci/run's, run there on a clone;
// the one that installs an MCP server from npm runs where KILN_MCP_EVERYTHING says npm
// has it (as .ci/run installs it).
func TestREADMEBlocksRun(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := runnableBlocks(string(data))
	if len(blocks) < 3 {
		t.Fatalf("the README shows %d runnable blocks; want the start, the interpreter's and the daemon's at least", len(blocks))
	}
	bin := filepath.Dir(clitest.Command(t).Path)
	for _, b := range blocks {
		t.Run("line"+strconv.Itoa(b.line), func(t *testing.T) {
			switch {
			case strings.Contains(b.text, "go install"):
				t.Skip(".ci/run runs the start block on a clone of the repository")
			case strings.Contains(b.text, "initdb") && (os.Geteuid() == 0 || !debianPostgres()):
				t.Skip("the PostgreSQL block runs as a user, where Debian's postgresql is installed: initdb refuses root")
			case strings.Contains(b.text, "npm install") && os.Getenv("KILN_MCP_EVERYTHING") == "":
				t.Skip("KILN_MCP_EVERYTHING is not set: npm has no server-everything to install offline")
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			home := clitest.ShortTemp(t)
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.text)
			env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
				"XDG_DATA_HOME="+home, "HOME="+t.TempDir())
			if b.lang == "python" {
				clitest.StartServe(t, filepath.Join(home, "kiln"))
				client, err := filepath.Abs("../../../../clients/python")
				if err != nil {
					t.Fatal(err)
				}
				cmd = exec.CommandContext(ctx, "python3", "-c", b.text)
				env = append(env, "PYTHONPATH="+client, "PYTHONDONTWRITEBYTECODE=1")
			}
			cmd.Dir, cmd.Env = t.TempDir(), env
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("README.md:%d: %v\n%s\n--- output\n%s", b.line, err, b.text, out)
			}
		})
	}
}

// debianPostgres reports whether Debian's postgresql package is installed, whose
// initdb the README's PostgreSQL block runs.
func debianPostgres() bool {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	return len(found) > 0
}

// TestRunnableBlocksAreThoseWithoutPrompts checks how blocks are told apart.
func TestRunnableBlocksAreThoseWithoutPrompts(t *testing.T) {
	readme := "x\n```sh\nkiln version\n```\n```sh\n$ kiln exec 1\n1\n```\n```go\nx := 1\n```\n```bash\necho a\necho b\n```\n"
	got := runnableBlocks(readme)
	if len(got) != 2 || got[0].text != "kiln version\n" || got[0].line != 2 || got[1].text != "echo a\necho b\n" || got[1].lang != "bash" {
		t.Fatalf("runnable blocks: %+v", got)
	}
}
