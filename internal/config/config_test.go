package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const good = `# a comment
[routes.main]
kind = "openai-chat"
base_url = "https://api.example.com/v1"
model = "some-model"
api_key_env = "EXAMPLE_API_KEY"
context_tokens = 128000
cache = ["prompt_cache_key"]
price_per_mtok = { input = 0.15, cached_input = 0.075, cache_write = 0.0, output = 0.60 }

[routes.test]
kind = "script"
script = "replies.jsonl"

[agent]
route = "main"
max_steps = 40
`

func TestParseGood(t *testing.T) {
	cfg, err := Parse("/etc/kiln/kiln.toml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	main := cfg.Routes["main"]
	if main.Kind != KindOpenAIChat || main.ContextTokens != 128000 || *main.Price.CachedInput != 0.075 || *main.Price.CacheWrite != 0 {
		t.Errorf("got %+v", main)
	}
	if main.Price.Input == nil || cfg.Agent.FoldRoute != "main" || cfg.Agent.FoldMarginTokens != DefaultFoldMarginTokens {
		t.Errorf("got %+v", cfg.Agent)
	}
	if got := cfg.ScriptPath(cfg.Routes["test"]); got != "/etc/kiln/replies.jsonl" {
		t.Errorf("script path %q", got)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, edit, want string
	}{
		{"unknown key", `max_steps = 40` + "\nmax_stepz = 3", "kiln.toml:18: agent.max_stepz: unknown key"},
		{"unknown route key", `model = "some-model"` + "\nmodle = \"x\"", "kiln.toml:6: routes.main.modle: unknown key"},
		{"unknown price key", `output = 0.60`, ""},
		{"bad kind", `kind = "openai-chat"` + "\n", ""},
		{"wrong type", `max_steps = 40`, ""},
		{"missing route", `route = "main"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := good
			switch tc.name {
			case "unknown price key":
				text = strings.Replace(good, "output = 0.60", "outptu = 0.60", 1)
				tc.want = "kiln.toml:9: routes.main.price_per_mtok.outptu: unknown key"
			case "bad kind":
				text = strings.Replace(good, `kind = "openai-chat"`, `kind = "openai"`, 1)
				tc.want = `kiln.toml:3: routes.main.kind: "openai" is not one of`
			case "wrong type":
				text = strings.Replace(good, "max_steps = 40", `max_steps = "forty"`, 1)
				tc.want = "kiln.toml:17: agent.max_steps"
			case "missing route":
				text = strings.Replace(good, `route = "main"`, `route = "mian"`, 1)
				tc.want = `kiln.toml:16: agent.route: no route "mian" is configured`
			default:
				text = strings.Replace(good, strings.SplitN(tc.edit, "\n", 2)[0], tc.edit, 1)
			}
			_, err := Parse("kiln.toml", []byte(text))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want %q", err, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if _, err := Load(path, false); err == nil {
		t.Fatal("a missing file loaded")
	}
	cfg, err := Load(path, true)
	if err != nil || len(cfg.Routes) != 0 || cfg.Agent.MaxSteps != DefaultMaxSteps {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = Load(path, false); err != nil || cfg.Routes["main"].Model != "some-model" {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	// At the size limit and one past it.
	at := strings.Repeat("#", MaxFileBytes-1) + "\n"
	if err := os.WriteFile(path, []byte(at), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, false); err != nil {
		t.Fatalf("a file at the limit: %v", err)
	}
	if err := os.WriteFile(path, []byte(at+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a file past the limit: %v", err)
	}
}

// TestAWindowNotSetIsDefaultedAndSaidSo: an HTTP route without context_tokens gets its
// model's known window or DefaultContextTokens, with a note; a set one stands.
func TestAWindowNotSetIsDefaultedAndSaidSo(t *testing.T) {
	for _, tc := range []struct {
		r    Route
		want int64
		note bool
	}{
		{Route{Kind: KindAnthropic, Model: "claude-sonnet-4-5"}, 200000, true},
		{Route{Kind: KindOpenAIChat, Model: "gpt-4.1-mini"}, 1047576, true},
		{Route{Kind: KindOpenAIChat, Model: "local-llm"}, DefaultContextTokens, true},
		{Route{Kind: KindOpenAIChat, Model: "local-llm", ContextTokens: 32000}, 32000, false},
		{Route{Kind: KindScript, Script: "s.jsonl"}, 0, false},
	} {
		got, note := tc.r.Window()
		if got != tc.want || (note != "") != tc.note {
			t.Errorf("%+v: got %d %q; want %d, note %v", tc.r, got, note, tc.want, tc.note)
		}
	}
	if _, err := Parse("k.toml", []byte("[agent]\nmax_day_cost_usd = -1\n")); err == nil || !strings.Contains(err.Error(), "max_day_cost_usd") {
		t.Errorf("a negative day cap: %v", err)
	}
}

// TestSessionDefaults: [sessions.NAME] names a route and instructions, a text or a file
// resolved against the configuration's folder; a route not configured, both forms at
// once, and a name no session may have are refused.
func TestSessionDefaults(t *testing.T) {
	cfg, err := Parse("/etc/kiln/kiln.toml", []byte(good+"\n[sessions.reviewer]\nroute = \"test\"\ninstructions_file = \"reviewer.md\"\n\n[sessions.terse]\ninstructions = \"Answer tersely.\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Sessions["reviewer"]; s.Route != "test" || cfg.InstructionsPath(s) != "/etc/kiln/reviewer.md" {
		t.Errorf("reviewer: %+v", s)
	}
	if s := cfg.Sessions["terse"]; s.Instructions != "Answer tersely." || cfg.InstructionsPath(s) != "" {
		t.Errorf("terse: %+v", s)
	}
	for _, tc := range []struct{ text, want string }{
		{"[sessions.x]\nroute = \"nope\"\n", `sessions.x.route: no route "nope"`},
		{"[sessions.x]\ninstructions = \"a\"\ninstructions_file = \"b\"\n", "not both"},
		{"[sessions.\"a b\"]\ninstructions = \"a\"\n", "is not a session id"},
		{"[sessions.x]\nrote = \"test\"\n", "sessions.x.rote: unknown key"},
	} {
		_, err := Parse("kiln.toml", []byte(good+"\n"+tc.text))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: %v; want %q", tc.text, err, tc.want)
		}
	}
	if _, err := Parse("kiln.toml", []byte("[sessions.x]\nroute = \"main\"\n")); err == nil || !strings.Contains(err.Error(), "runs no agent") {
		t.Errorf("a session route without an agent: %v", err)
	}
}

// TestRetention reads a positive duration, and refuses another at its line.
func TestRetention(t *testing.T) {
	cfg, err := Parse("kiln.toml", []byte("retention = \"168h\"\n"+good))
	if err != nil || cfg.RetentionPeriod() != 168*time.Hour {
		t.Fatalf("retention 168h: %v %v", cfg.RetentionPeriod(), err)
	}
	if cfg, err := Parse("kiln.toml", []byte(good)); err != nil || cfg.RetentionPeriod() != 0 {
		t.Fatalf("no retention: %v %v", cfg.RetentionPeriod(), err)
	}
	for _, bad := range []string{`"7d"`, `"0s"`, `"-1h"`, `7`} {
		_, err := Parse("kiln.toml", []byte("# first\nretention = "+bad+"\n"+good))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "kiln.toml:2: retention") {
			t.Errorf("retention = %s: %v; want it refused at line 2", bad, err)
		}
	}
}

// TestStoreIsAPostgresURLWithoutPassword: store names a PostgreSQL database; one whose
// URL carries a password, which would sit in the file, is refused at its line, as is
// anything but a postgres:// URL.
func TestStoreIsAPostgresURLWithoutPassword(t *testing.T) {
	cfg, err := Parse("kiln.toml", []byte(`store = "postgres://kiln@db.example:5432/kiln?sslmode=verify-full"`+"\n"))
	if err != nil || cfg.Store != "postgres://kiln@db.example:5432/kiln?sslmode=verify-full" {
		t.Fatalf("got %q, %v", cfg.Store, err)
	}
	for _, c := range []struct{ store, want string }{
		{"postgres://kiln:secret@db.example/kiln", "kiln.toml:2: store: the URL carries a password; give it in the PGPASSWORD"},
		{"postgresql://kiln@db.example/kiln?password=secret", "kiln.toml:2: store: the URL carries a password"},
		{"/var/lib/kiln", "kiln.toml:2: store: must be a postgres:// URL"},
		{"mysql://db.example/kiln", "kiln.toml:2: store: must be a postgres:// URL"},
	} {
		_, err := Parse("kiln.toml", []byte("# the record\nstore = \""+c.store+"\"\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("store %q: %v; want %q", c.store, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the refusal shows the password: %v", err)
		}
	}
}

// TestLeaseTTLIsBounded: lease_ttl is a duration of MinLeaseTTL..MaxLeaseTTL, read at
// each bound and refused one past it, and only beside a store daemons share.
func TestLeaseTTLIsBounded(t *testing.T) {
	const store = "store = \"postgres://kiln@db/kiln\"\n"
	for _, ok := range []struct {
		text string
		want time.Duration
	}{{`"1s"`, MinLeaseTTL}, {`"10m"`, MaxLeaseTTL}, {`"15s"`, 15 * time.Second}} {
		cfg, err := Parse("kiln.toml", []byte(store+"lease_ttl = "+ok.text+"\n"+good))
		if err != nil || cfg.LeaseTerm() != ok.want {
			t.Errorf("lease_ttl = %s: %v, %v; want %v", ok.text, cfg.LeaseTerm(), err, ok.want)
		}
	}
	for _, bad := range []string{`"999ms"`, `"10m0.001s"`, `"0s"`, `"soon"`} {
		_, err := Parse("kiln.toml", []byte(store+"lease_ttl = "+bad+"\n"+good))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "kiln.toml:2: lease_ttl") {
			t.Errorf("lease_ttl = %s: %v; want it refused at line 2", bad, err)
		}
	}
	if _, err := Parse("kiln.toml", []byte("lease_ttl = \"15s\"\n"+good)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "store daemons share") {
		t.Errorf("lease_ttl without a store: %v; want it refused", err)
	}
}
