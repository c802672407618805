package config

import (
	"errors"
	"strings"
	"testing"
)

func TestRemotes(t *testing.T) {
	cfg, err := Parse("/etc/kiln/kiln.toml", []byte(`
[remotes.build-host]
kind = "kiln"
url = "https://build-host:8765"
token_env = "BUILD_HOST_TOKEN"
ca_file = "build-host.pem"

[remotes.gpu]
kind = "exec"
command = ["ssh", "gpu", "kiln", "serve", "--stdio"]

[remotes.local]
kind = "kiln"
url = "unix:///run/kiln/kiln.sock"
`))
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Remotes["build-host"]
	if b.Kind != RemoteKiln || b.TokenEnv != "BUILD_HOST_TOKEN" || cfg.CAPath(b) != "/etc/kiln/build-host.pem" {
		t.Errorf("build-host: %+v, ca %q", b, cfg.CAPath(b))
	}
	if g := cfg.Remotes["gpu"]; g.Kind != RemoteExec || len(g.Command) != 5 {
		t.Errorf("gpu: %+v", g)
	}
	if l := cfg.Remotes["local"]; cfg.CAPath(l) != "" {
		t.Errorf("local: ca %q", cfg.CAPath(l))
	}
}

func TestRemotesRefused(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[remotes.a]\nkind = \"kiln\"\nurl = \"http://a:1\"\ntoken_env = \"T\"", "kiln.toml:3: remotes.a.url: \"http://a:1\" is not https://host:port or unix:///path/kiln.sock"},
		{"[remotes.a]\nkind = \"kiln\"\nurl = \"https://a:1\"", "remotes.a.token_env: an https target names"},
		{"[remotes.a]\nkind = \"exec\"", "remotes.a.command: an exec target names its command"},
		{"[remotes.a]\nkind = \"exec\"\ncommand = [\"ssh\"]\nurl = \"https://a:1\"", "remotes.a.url: an exec target has a command"},
		{"[remotes.a]\nkind = \"kiln\"\nurl = \"unix:///s\"\ncommand = [\"x\"]", "remotes.a.command: only an exec target"},
		{"[remotes.a]\nkind = \"ssh\"", "remotes.a.kind: \"ssh\" is not one of kiln, exec"},
		{"[remotes.a]\nkind = \"exec\"\ncommand = [\"ssh\"]\nport = 22", "remotes.a.port: unknown key"},
	} {
		_, err := Parse("kiln.toml", []byte(tc.text))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v; want %q", tc.text, err, tc.want)
		}
	}
}
