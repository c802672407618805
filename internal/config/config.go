// Package config reads kiln.toml, the file that names the model routes an agent may call
// and how its turns are bounded. Reading is strict: a key the file format does not define,
// a value of the wrong type, and a value out of its range are each an error naming the
// file, the line and the key, so that a mistyped setting never silently falls back to a
// default.
//
//	retention = "168h"                # prune sessions stopped longer ago
//	store = "postgres://kiln@db.example/kiln" # the daemon's record; password in PGPASSWORD
//	[routes.main]
//	kind = "openai-chat"            # openai-chat | openai-responses | anthropic | script
//	base_url = "https://api.example.com/v1"
//	model = "some-model"
//	api_key_env = "EXAMPLE_API_KEY"
//	context_tokens = 128000
//	cache = ["prompt_cache_key"]
//	price_per_mtok = { input = 0.15, cached_input = 0.075, cache_write = 0.0, output = 0.60 }
//	[agent]
//	route = "main"
//	max_steps = 40
//	[remotes.build-host]
//	kind = "kiln"                   # kiln | exec
//	url = "https://build-host:8765" # or unix:///path/kiln.sock
//	token_env = "BUILD_HOST_TOKEN"
//	ca_file = "build-host.pem"
package config

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/kilnrt/kiln/internal/limits"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kilnrt/kiln/internal/wire"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// FileName is the configuration file's name inside the data directory.
const FileName = "kiln.toml"

// MaxFileBytes bounds the configuration file read.
const MaxFileBytes = 1 << 20

// Route kinds.
const (
	KindOpenAIChat      = "openai-chat"
	KindOpenAIResponses = "openai-responses"
	KindAnthropic       = "anthropic"
	KindScript          = "script"
)

// Kinds are the route kinds, in the order the documentation lists them.
var Kinds = []string{KindOpenAIChat, KindOpenAIResponses, KindAnthropic, KindScript}

// CacheOptions are the cache request options a route may declare it accepts.
var CacheOptions = []string{"prompt_cache_key", "prompt_cache_retention", "prompt_cache_options"}

// Defaults of the agent's settings.
const (
	DefaultMaxSteps          = 40
	DefaultFoldMarginTokens  = 16384
	DefaultCallTimeoutSecond = 300
)

// ErrInvalid is a configuration that cannot be used; the error says where and why.
var ErrInvalid = errors.New("config: invalid")

// Config is a read kiln.toml.
type Config struct {
	// Path is the file read, "" for a configuration made in code.
	Path string `toml:"-"`
	// Store is the daemon's record, a postgres:// URL; "" keeps it in the data
	// directory's SQLite file. A password is never in the file: PGPASSWORD gives it.
	Store string `toml:"store"`
	// LeaseTTL is the term of the daemon's leases on a store daemons share, as a
	// duration such as "15s", MinLeaseTTL..MaxLeaseTTL; "" is the daemon's default.
	LeaseTTL string            `toml:"lease_ttl"`
	Routes   map[string]Route  `toml:"routes"`
	Agent    Agent             `toml:"agent"`
	Remotes  map[string]Remote `toml:"remotes"`
	// Sessions are defaults of the daemon sessions of each name, [sessions.NAME].
	Sessions map[string]Session `toml:"sessions"`
	// Sandbox and Limits confine and bound every daemon session that gives none of its
	// own, [sandbox] and [limits].
	Sandbox Sandbox        `toml:"sandbox"`
	Limits  limits.Session `toml:"limits"`
	// Retention is how long the daemon keeps a stopped session listed before it prunes
	// it (its record stays), as a duration such as "168h"; "" keeps them until a prune.
	Retention string `toml:"retention"`
}

// Session is what a daemon session of one name is opened with unless the request that
// opens it says otherwise: its agent's route and its own instructions, a text or a file.
type Session struct {
	// Route names the route of the session's agent; default the [agent] route.
	Route string `toml:"route"`
	// Instructions is the text of the session's own instruction source.
	Instructions string `toml:"instructions"`
	// InstructionsFile is the file of the session's own instruction source, relative
	// to the configuration file.
	InstructionsFile string `toml:"instructions_file"`
	// Sandbox and Network confine the session, as [sandbox]'s profile and network do
	// every session; Limits bound it, over [limits].
	Sandbox string         `toml:"sandbox"`
	Network string         `toml:"network"`
	Limits  limits.Session `toml:"limits"`
}

// RetentionPeriod is Retention as a duration, 0 when it is "" (validated on load).
// Bounds of lease_ttl.
const (
	MinLeaseTTL = time.Second
	MaxLeaseTTL = 10 * time.Minute
)

// LeaseTerm is lease_ttl as a duration, 0 when unset.
func (c Config) LeaseTerm() time.Duration {
	d, _ := time.ParseDuration(c.LeaseTTL)
	return d
}

func (c Config) RetentionPeriod() time.Duration {
	d, _ := time.ParseDuration(c.Retention)
	return d
}

// Remote target kinds.
const (
	RemoteKiln = "kiln" // a daemon's HTTP API at url
	RemoteExec = "exec" // a command carrying the API on its standard input and output
)

// Remote is a remote target: another kiln daemon, where remote.* runs a session's code.
type Remote struct {
	Kind string `toml:"kind"`
	// URL is https://host:port or unix:///path/kiln.sock (kind kiln).
	URL string `toml:"url"`
	// TokenEnv names the environment variable holding the target's bearer token.
	TokenEnv string `toml:"token_env"`
	// CAFile is a PEM file of the certificates that may sign the target's, relative to
	// the config file; empty trusts the system's roots.
	CAFile string `toml:"ca_file"`
	// Command is an exec target's argv, e.g. ["ssh", "host", "kiln", "serve", "--stdio"].
	Command []string `toml:"command"`
}

// Route is one model route: a kind of client, where it connects, and what it costs.
type Route struct {
	Kind      string `toml:"kind"`
	BaseURL   string `toml:"base_url"`
	Model     string `toml:"model"`
	APIKeyEnv string `toml:"api_key_env"`
	// ContextTokens is the route's context window; folds keep requests below it.
	ContextTokens int64 `toml:"context_tokens"`
	// Cache lists the cache request options the route accepts.
	Cache []string `toml:"cache"`
	// Price is in dollars per million tokens; a price absent is a cost not computed.
	Price Price `toml:"price_per_mtok"`
	// Tools false makes the route a text route: code comes as fenced python blocks.
	Tools *bool `toml:"tools"`
	// Stream false asks for whole responses (openai-chat only; the others stream).
	Stream *bool `toml:"stream"`
	// Images false keeps the images cells display from the model; by default an HTTP
	// route sends them (PNG and JPEG, bounded per step).
	Images *bool `toml:"images"`
	// TimeoutSeconds bounds one call, retries excluded; default 300.
	TimeoutSeconds int64 `toml:"timeout_s"`
	// MaxOutputTokens bounds a reply; default 8192.
	MaxOutputTokens int64 `toml:"max_output_tokens"`
	// Script is the JSONL file of a script route's replies, relative to the config file.
	Script string `toml:"script"`
}

// Price is a route's price per million tokens of each kind, in dollars.
type Price struct {
	Input       *float64 `toml:"input"`
	CachedInput *float64 `toml:"cached_input"`
	CacheWrite  *float64 `toml:"cache_write"`
	Output      *float64 `toml:"output"`
}

// Agent bounds the agent's turns.
type Agent struct {
	// Route names the route of step calls.
	Route string `toml:"route"`
	// FoldRoute names the route of fold calls; default Route.
	FoldRoute string `toml:"fold_route"`
	// MaxSteps ends a turn step_cap; default 40.
	MaxSteps int `toml:"max_steps"`
	// MaxTurnTokens ends a turn token_cap once its calls used this many tokens; 0: none.
	MaxTurnTokens int64 `toml:"max_turn_tokens"`
	// MaxTurnCostUSD ends a turn cost_cap once its calls cost this much; 0: none.
	MaxTurnCostUSD float64 `toml:"max_turn_cost_usd"`
	// TurnDeadlineSeconds ends a turn deadline after this long; 0: none.
	TurnDeadlineSeconds int64 `toml:"turn_deadline_s"`
	// FoldMarginTokens is kept free below the context window; default 16384, raised by
	// the agent to one reply and one cell's whole output.
	FoldMarginTokens int64 `toml:"fold_margin_tokens"`
	// MaxSessionCostUSD ends a turn cost_cap once the session's calls cost this much in
	// all; 0: none.
	MaxSessionCostUSD float64 `toml:"max_session_cost_usd"`
	// MaxDayCostUSD ends a turn cost_cap once the calls of the daemon's agents cost this
	// much in a UTC day; 0: none.
	MaxDayCostUSD float64 `toml:"max_day_cost_usd"`
	// Review is the execution.review policy of the agent's cells: allow (the default)
	// runs each unasked; hold holds each until the operator approves or rejects it.
	Review string `toml:"review"`
	// ReviewTimeoutSeconds is how long a held cell waits for a decision before it is
	// rejected; default 3600.
	ReviewTimeoutSeconds int64 `toml:"review_timeout_s"`
}

// DefaultContextTokens is the window of an HTTP route whose model kiln does not know and
// whose context_tokens is not set: the smallest window of the models it knows.
const DefaultContextTokens = 128000

// knownWindows are the context windows of models kiln knows, by model name prefix,
// longest prefix first.
var knownWindows = []struct {
	prefix string
	tokens int64
}{
	{"gpt-4.1", 1047576}, {"gpt-4o", 128000}, {"gpt-5", 400000}, {"o3", 200000}, {"o4-mini", 200000},
	{"claude-", 200000}, {"deepseek-", 128000},
}

// Window is the route's context window and, when it was not set, a note saying what it
// was defaulted to and why: the model's known window, or DefaultContextTokens. A script
// route has none (0).
func (r Route) Window() (tokens int64, note string) {
	if r.ContextTokens > 0 || r.Kind == KindScript {
		return r.ContextTokens, ""
	}
	for _, k := range knownWindows {
		if strings.HasPrefix(r.Model, k.prefix) {
			return k.tokens, fmt.Sprintf("context_tokens is not set: %d, the window of %s models", k.tokens, k.prefix)
		}
	}
	return DefaultContextTokens, fmt.Sprintf("context_tokens is not set and model %q is not one kiln knows: %d; set it to the model's window",
		r.Model, DefaultContextTokens)
}

// Load reads the configuration file at path. A file that does not exist gives the
// empty configuration (no routes) when missingOK, an error otherwise.
func Load(path string, missingOK bool) (Config, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && missingOK {
		return Config{Path: path, Agent: defaults(Agent{})}, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := readBounded(f)
	if err != nil {
		return Config{}, fmt.Errorf("config: %s: %w", path, err)
	}
	return Parse(path, data)
}

// readBounded reads f whole, refusing a file over MaxFileBytes.
func readBounded(f *os.File) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrInvalid, MaxFileBytes)
	}
	return data, nil
}

// Parse reads data, the text of the file at path (named in errors).
func Parse(path string, data []byte) (Config, error) {
	cfg := Config{Path: path}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, decodeError(path, err, keyLines(data))
	}
	cfg.Agent = defaults(cfg.Agent)
	lines := keyLines(data)
	if err := cfg.validate(); err != nil {
		var ke *keyError
		if errors.As(err, &ke) {
			return Config{}, fmt.Errorf("%w: %s:%d: %s: %s", ErrInvalid, path, lines.of(ke.key), ke.key, ke.msg)
		}
		return Config{}, err
	}
	return cfg, nil
}

// decodeError is the decoder's error as file, line and key.
func decodeError(path string, err error, lines lineIndex) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		msgs := make([]string, len(strict.Errors))
		for i, e := range strict.Errors {
			row, _ := e.Position()
			msgs[i] = fmt.Sprintf("%s:%d: %s: unknown key", path, row, lines.full(row, e.Key()))
		}
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		if key == "" {
			return fmt.Errorf("%w: %s:%d: %v", ErrInvalid, path, row, de)
		}
		return fmt.Errorf("%w: %s:%d: %s: %v", ErrInvalid, path, row, key, de)
	}
	return fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
}

func defaults(a Agent) Agent {
	if a.MaxSteps == 0 {
		a.MaxSteps = DefaultMaxSteps
	}
	if a.FoldMarginTokens == 0 {
		a.FoldMarginTokens = DefaultFoldMarginTokens
	}
	if a.FoldRoute == "" {
		a.FoldRoute = a.Route
	}
	return a
}

// keyError is a value refused, at a key.
type keyError struct{ key, msg string }

func (e *keyError) Error() string { return e.key + ": " + e.msg }

func refuse(key, format string, args ...any) error {
	return &keyError{key: key, msg: fmt.Sprintf(format, args...)}
}

// validate checks every value's range, in file order of the keys' names.
func (c *Config) validate() error {
	names := make([]string, 0, len(c.Routes))
	for name := range c.Routes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := c.Routes[name].validate("routes." + name); err != nil {
			return err
		}
	}
	remotes := make([]string, 0, len(c.Remotes))
	for name := range c.Remotes {
		remotes = append(remotes, name)
	}
	sort.Strings(remotes)
	for _, name := range remotes {
		if err := c.Remotes[name].validate("remotes." + name); err != nil {
			return err
		}
	}
	sessions := make([]string, 0, len(c.Sessions))
	for name := range c.Sessions {
		sessions = append(sessions, name)
	}
	sort.Strings(sessions)
	for _, name := range sessions {
		if err := c.validateSession(name); err != nil {
			return err
		}
	}
	if c.Retention != "" {
		if d, err := time.ParseDuration(c.Retention); err != nil || d <= 0 {
			return refuse("retention", "%q is not a positive duration such as \"168h\"", c.Retention)
		}
	}
	if c.LeaseTTL != "" {
		if d, err := time.ParseDuration(c.LeaseTTL); err != nil || d < MinLeaseTTL || d > MaxLeaseTTL {
			return refuse("lease_ttl", "%q is not a duration of %s..%s, such as \"15s\"", c.LeaseTTL, MinLeaseTTL, MaxLeaseTTL)
		}
		if c.Store == "" {
			return refuse("lease_ttl", "a lease term applies to a store daemons share: give store = \"postgres://…\" too")
		}
	}
	if c.Store != "" {
		if msg := storeProblem(c.Store); msg != "" {
			return refuse("store", "%s", msg)
		}
	}
	if err := validateSandbox("sandbox", c.Sandbox.Profile, c.Sandbox.Network); err != nil {
		return err
	}
	if err := validateLimits("limits", c.Limits); err != nil {
		return err
	}
	a := c.Agent
	for _, named := range []struct{ key, route string }{{"agent.route", a.Route}, {"agent.fold_route", a.FoldRoute}} {
		if _, ok := c.Routes[named.route]; named.route != "" && !ok {
			return refuse(named.key, "no route %q is configured", named.route)
		}
	}
	switch {
	case a.MaxSteps < 0:
		return refuse("agent.max_steps", "must be positive")
	case a.MaxTurnTokens < 0:
		return refuse("agent.max_turn_tokens", "must not be negative")
	case a.MaxTurnCostUSD < 0:
		return refuse("agent.max_turn_cost_usd", "must not be negative")
	case a.TurnDeadlineSeconds < 0:
		return refuse("agent.turn_deadline_s", "must not be negative")
	case a.FoldMarginTokens < 0:
		return refuse("agent.fold_margin_tokens", "must not be negative")
	case a.MaxSessionCostUSD < 0:
		return refuse("agent.max_session_cost_usd", "must not be negative")
	case a.MaxDayCostUSD < 0:
		return refuse("agent.max_day_cost_usd", "must not be negative")
	case a.Review != "" && a.Review != "allow" && a.Review != "hold":
		return refuse("agent.review", "%q is not allow or hold", a.Review)
	case a.ReviewTimeoutSeconds < 0:
		return refuse("agent.review_timeout_s", "must not be negative")
	}
	return nil
}

// validateSession checks [sessions.name].
func (c *Config) validateSession(name string) error {
	at, s := "sessions."+name, c.Sessions[name]
	switch {
	case !wire.ValidIdentifier(name) || name == "." || name == "..":
		return refuse(at, "%q is not a session id: 1..128 of [A-Za-z0-9_.-]", name)
	case s.Route != "" && c.Agent.Route == "":
		return refuse(at+".route", "the daemon runs no agent: no [agent] route is configured")
	case s.Instructions != "" && s.InstructionsFile != "":
		return refuse(at+".instructions_file", "a session's instructions are a text or a file, not both")
	}
	if _, ok := c.Routes[s.Route]; s.Route != "" && !ok {
		return refuse(at+".route", "no route %q is configured", s.Route)
	}
	if err := validateSandbox(at, s.Sandbox, s.Network); err != nil {
		return err
	}
	return validateLimits(at+".limits", s.Limits)
}

// InstructionsPath is a session's instructions_file, resolved against the
// configuration file's folder.
func (c Config) InstructionsPath(s Session) string {
	if s.InstructionsFile == "" || filepath.IsAbs(s.InstructionsFile) || c.Path == "" {
		return s.InstructionsFile
	}
	return filepath.Join(filepath.Dir(c.Path), s.InstructionsFile)
}

// storeProblem says what is wrong with store as kiln.toml's record URL, "" if nothing:
// it must be a postgres:// URL, and carry no password, which would sit in the file.
func storeProblem(store string) string {
	u, err := url.Parse(store)
	switch {
	case err != nil:
		return fmt.Sprintf("not a URL: %v", err)
	case u.Scheme != "postgres" && u.Scheme != "postgresql":
		return "must be a postgres:// URL (the SQLite record needs no setting)"
	}
	if _, set := u.User.Password(); set || u.Query().Has("password") {
		return "the URL carries a password; give it in the PGPASSWORD environment variable (or ~/.pgpass), never in kiln.toml"
	}
	return ""
}

func (r Route) validate(at string) error {
	if !slices.Contains(Kinds, r.Kind) {
		return refuse(at+".kind", "%q is not one of %s", r.Kind, strings.Join(Kinds, ", "))
	}
	if r.Kind == KindScript {
		if r.Script == "" {
			return refuse(at+".script", "a script route names its JSONL file")
		}
		if r.Images != nil {
			return refuse(at+".images", "a script route sends no request to show images in")
		}
	} else {
		if r.Model == "" {
			return refuse(at+".model", "a %s route names its model", r.Kind)
		}
		if r.Script != "" {
			return refuse(at+".script", "only a script route has a script")
		}
	}
	if r.Stream != nil && r.Kind != KindOpenAIChat {
		return refuse(at+".stream", "only an openai-chat route may turn streaming off")
	}
	for _, c := range r.Cache {
		if !slices.Contains(CacheOptions, c) {
			return refuse(at+".cache", "%q is not one of %s", c, strings.Join(CacheOptions, ", "))
		}
	}
	switch {
	case r.ContextTokens < 0:
		return refuse(at+".context_tokens", "must not be negative")
	case r.TimeoutSeconds < 0:
		return refuse(at+".timeout_s", "must not be negative")
	case r.MaxOutputTokens < 0:
		return refuse(at+".max_output_tokens", "must not be negative")
	}
	for _, price := range []struct {
		key string
		p   *float64
	}{{"input", r.Price.Input}, {"cached_input", r.Price.CachedInput}, {"cache_write", r.Price.CacheWrite}, {"output", r.Price.Output}} {
		if price.p != nil && *price.p < 0 {
			return refuse(at+".price_per_mtok."+price.key, "must not be negative")
		}
	}
	return nil
}

func (r Remote) validate(at string) error {
	switch r.Kind {
	case RemoteKiln:
		if !strings.HasPrefix(r.URL, "https://") && !strings.HasPrefix(r.URL, "unix:///") {
			return refuse(at+".url", "%q is not https://host:port or unix:///path/kiln.sock: a token never crosses a network in clear text", r.URL)
		}
		if len(r.Command) > 0 {
			return refuse(at+".command", "only an exec target has a command")
		}
		if strings.HasPrefix(r.URL, "https://") && r.TokenEnv == "" {
			return refuse(at+".token_env", "an https target names the environment variable of its token")
		}
	case RemoteExec:
		if len(r.Command) == 0 || r.Command[0] == "" {
			return refuse(at+".command", "an exec target names its command, e.g. [\"ssh\", \"host\", \"kiln\", \"serve\", \"--stdio\"]")
		}
		if r.URL != "" || r.CAFile != "" {
			return refuse(at+".url", "an exec target has a command, not a url or ca_file")
		}
	default:
		return refuse(at+".kind", "%q is not one of %s, %s", r.Kind, RemoteKiln, RemoteExec)
	}
	return nil
}

// CAPath is a remote's ca_file, resolved against the configuration file's folder.
func (c Config) CAPath(r Remote) string {
	if r.CAFile == "" || filepath.IsAbs(r.CAFile) || c.Path == "" {
		return r.CAFile
	}
	return filepath.Join(filepath.Dir(c.Path), r.CAFile)
}

// ScriptPath is a script route's file, resolved against the configuration file's folder.
func (c Config) ScriptPath(r Route) string {
	if filepath.IsAbs(r.Script) || c.Path == "" {
		return r.Script
	}
	return filepath.Join(filepath.Dir(c.Path), r.Script)
}

// lineIndex maps dotted keys to the line they are set on.
type lineIndex map[string]int

// of is the line of key, or of its nearest enclosing table; 0 when none is known.
func (l lineIndex) of(key string) int {
	for k := key; k != ""; {
		if n, ok := l[k]; ok {
			return n
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 0
}

// full is the whole dotted name of key, set on line row: the decoder names a key of an
// inline table without the inline table's own key.
func (l lineIndex) full(row int, key []string) string {
	if len(key) == 0 {
		return ""
	}
	best := strings.Join(key, ".")
	for k, n := range l {
		if n == row && strings.HasSuffix(k, "."+key[len(key)-1]) && strings.HasPrefix(k, strings.Join(key[:len(key)-1], ".")) && len(k) > len(best) {
			best = k
		}
	}
	return best
}

// keyLines indexes the lines of data's keys. data decoded already, so it parses.
func keyLines(data []byte) lineIndex {
	out := lineIndex{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = keyOf(e)
			out.note(&p, table, e)
		case unstable.KeyValue:
			out.keyValue(&p, table, e)
		}
	}
	return out
}

func (l lineIndex) keyValue(p *unstable.Parser, table []string, kv *unstable.Node) {
	key := slices.Concat(table, keyOf(kv))
	l.note(p, key, kv)
	if v := kv.Value(); v.Kind == unstable.InlineTable {
		it := v.Children()
		for it.Next() {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				l.keyValue(p, key, c)
			}
		}
	}
}

func (l lineIndex) note(p *unstable.Parser, key []string, n *unstable.Node) {
	it := n.Key()
	if !it.Next() || len(key) == 0 {
		return
	}
	first := it.Node()
	if first.Raw.Length == 0 {
		return
	}
	name := strings.Join(key, ".")
	if _, ok := l[name]; !ok {
		l[name] = p.Shape(first.Raw).Start.Line
	}
}

func keyOf(n *unstable.Node) []string {
	var out []string
	it := n.Key()
	for it.Next() {
		out = append(out, string(it.Node().Data))
	}
	return out
}
