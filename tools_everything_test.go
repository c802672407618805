package kiln_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kilnrt/kiln"
)

// everythingEnv names the reference MCP server's executable, as .ci/run installs it:
// npm's @modelcontextprotocol/server-everything. Without it the test installs the
// package into a temporary directory.
const everythingEnv = "KILN_MCP_EVERYTHING"

// everythingServer is the reference server's executable.
func everythingServer(t *testing.T) string {
	if bin := os.Getenv(everythingEnv); bin != "" {
		return bin
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is absent: the reference MCP server from npm cannot run here (or set %s)", tool, everythingEnv)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", dir,
		"@modelcontextprotocol/server-everything@2026.8.31")
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(dir, ".npm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install of the reference MCP server: %v\n%s", err, out)
	}
	return filepath.Join(dir, "node_modules", ".bin", "mcp-server-everything")
}

func TestCellsCallTheReferenceMCPServer(t *testing.T) {
	t.Parallel()
	wb, err := kiln.OpenWorkbench(context.Background(), kiln.WorkbenchOptions{
		MCP: []kiln.MCPServer{{Name: "everything", Command: []string{everythingServer(t)}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	for _, c := range []struct{ code, want string }{
		{"'get_sum' in dir(tools.everything), tools.everything.get_sum.__doc__.splitlines()[0]",
			"(True, 'Returns the sum of two numbers')"},
		{"await tools.everything.echo(message='hi')", "'Echo: hi'"},
		{"await tools.everything.get_sum(a=2, b=3)", "'The sum of 2 and 3 is 5.'"},
		{"r = await tools.everything.get_structured_content(location='Chicago')\nsorted(r)", "['conditions', 'humidity', 'temperature']"},
		{"'[kiln: an image, image/png' in await tools.everything.get_tiny_image()", "True"},
		{"try:\n    await tools.everything.get_structured_content(location='Paris')\nexcept tools.ToolError as e:\n    r = e.code\nr", "'invalid_arguments'"},
	} {
		rec, err := wb.Execute(context.Background(), c.code)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(rec); got != c.want {
			t.Errorf("%s:\ngot %s %q %v; want %q", c.code, rec.Status, got, rec.Error, c.want)
		}
	}
}
