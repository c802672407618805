package peertests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/client"
	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/route/routetest"
)

// TestCellsCannotReadTheDaemonsKeys: the model key kiln.toml's route names by
// api_key_env, and a remote's token_env, are the daemon's alone. Neither is in
// os.environ or /proc/self/environ of a cell, forked or spawned, nor of its
// workspace.run command, nor of the agent's own cell; the daemon still sends the key
// to the model.
func TestCellsCannotReadTheDaemonsKeys(t *testing.T) {
	t.Parallel()
	const key, token = "sk-the-operators-model-key", "the-remotes-bearer-token"
	probe := `import os
env = open("/proc/self/environ", "rb").read()
r = await runtime.workspace.run(["sh", "-c", "cat /proc/self/environ; env"])
print("env", "KILN_TEST_MODEL_KEY" in os.environ, "KILN_TEST_REMOTE_TOKEN" in os.environ,
      b"` + key + `" in env, b"` + token + `" in env,
      "run", "` + key + `" in r["stdout"], "` + token + `" in r["stdout"], r["exit_code"])
`
	const want = "env False False False False run False False 0\n"
	for _, start := range []string{"forked", "spawned"} {
		t.Run(start, func(t *testing.T) {
			t.Parallel()
			srv := routetest.New(t, routetest.Anthropic, routetest.Step{Code: routetest.Code(probe)},
				routetest.Step{Code: routetest.Code(`await runtime.wait(None, reason="done")`)})
			dir := clitest.ShortTemp(t)
			cfg := "[routes.a]\nkind = \"anthropic\"\nbase_url = \"" + srv.URL + "\"\nmodel = \"claude-test\"\n" +
				"api_key_env = \"KILN_TEST_MODEL_KEY\"\ncontext_tokens = 200000\n\n[agent]\nroute = \"a\"\n\n" +
				"[remotes.far]\nkind = \"kiln\"\nurl = \"unix://" + filepath.Join(dir, "far.sock") + "\"\n" +
				"token_env = \"KILN_TEST_REMOTE_TOKEN\"\n"
			if err := os.WriteFile(filepath.Join(dir, "kiln.toml"), []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			zygote := "KILN_ZYGOTE="
			if start == "spawned" {
				zygote += "off"
			}
			s := clitest.StartServeCommand(t, []string{"env", "KILN_TEST_MODEL_KEY=" + key, "KILN_TEST_REMOTE_TOKEN=" + token, zygote}, dir)
			s.Call("POST", "/v1/sessions", `{"id":"c"}`, 201, nil)
			if sandbox := sessionSandbox(t, s, "c"); !strings.Contains(sandbox, `"`+start+`"`) {
				t.Skipf("the worker was not %s: %s", start, sandbox)
			}
			if got := peerCell(t, s, "c", probe); got != want {
				t.Errorf("a cell printed %q; want %q", got, want)
			}

			s.Call("POST", "/v1/sessions", `{"id":"a"}`, 201, nil)
			s.Call("POST", "/v1/sessions/a/inputs", `{"text":"look"}`, 201, nil)
			clitest.FollowUntil(t, dir, "a", 0, func(e client.Event) bool {
				return e.Kind == "turn.end" && clitest.EndReason(t, e) == "waited"
			})
			bodies, headers := srv.Bodies(), srv.Headers()
			if len(bodies) < 2 || !strings.Contains(string(bodies[1]), strings.TrimSuffix(want, "\n")) {
				t.Errorf("the agent's cell did not print %q: %d requests", want, len(bodies))
			}
			if got := headers[0].Get("Authorization"); got != "Bearer "+key {
				t.Errorf("the model was sent %q; want the key %q", got, key)
			}
		})
	}
}
