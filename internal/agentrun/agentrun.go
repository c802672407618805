// Package agentrun runs a session's agent: it reads the agent's configuration
// (kiln.toml), builds the model routes it names, and drives internal/agent's turn loop
// over an internal/session session: the agent's cells are the session's cells, its
// inputs the session's inbox, and its folds move the session's instruction header.
// It is apart from internal/session so that what only runs cells links no model SDK.
package agentrun

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/approval"
	"github.com/kilnrt/kiln/internal/config"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/live"
	"github.com/kilnrt/kiln/internal/remote"
	"github.com/kilnrt/kiln/internal/route"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/textcut"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wire"
)

// ConfigFile is the configuration file's name in the data directory.
const ConfigFile = config.FileName

// Config is a read kiln.toml: the model routes and the agent's caps.
type Config struct {
	cfg config.Config
	// ledger keeps the day's spending of every agent started from this configuration.
	ledger *agent.Ledger
	// secrets are the values of the environment variables its routes' api_key_env and
	// its remotes' token_env name, read as it was loaded.
	secrets map[string]string
}

// LoadConfig reads the configuration file at path. A missing file is the empty
// configuration when missingOK. A bad file is an error naming the file, line and key.
func LoadConfig(path string, missingOK bool) (*Config, error) {
	cfg, err := config.Load(path, missingOK)
	if err != nil {
		return nil, err
	}
	c := &Config{cfg: cfg, ledger: new(agent.Ledger), secrets: map[string]string{}}
	for _, r := range cfg.Routes {
		if r.APIKeyEnv != "" {
			c.secrets[r.APIKeyEnv] = os.Getenv(r.APIKeyEnv)
		}
	}
	for _, r := range cfg.Remotes {
		if r.TokenEnv != "" {
			c.secrets[r.TokenEnv] = os.Getenv(r.TokenEnv)
		}
	}
	return c, nil
}

// SecretEnv names the environment variables the configuration read keys and tokens
// from. A daemon takes them out of its environment, so that no process it starts has
// them; the configuration keeps what they held (Secret).
func (c *Config) SecretEnv() []string {
	if c == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.secrets))
}

// Secret is what the environment variable name held when the configuration was
// loaded, for a name its routes or remotes read a key or token from; "" for any other.
func (c *Config) Secret(name string) string {
	if c == nil {
		return ""
	}
	return c.secrets[name]
}

// Retention is how long the daemon keeps a stopped session listed (kiln.toml's
// retention), 0 for until a prune.
func (c *Config) Retention() time.Duration {
	if c == nil {
		return 0
	}
	return c.cfg.RetentionPeriod()
}

// LeaseTTL is the term of the daemon's leases on a shared store (kiln.toml's
// lease_ttl), 0 for the daemon's default.
func (c *Config) LeaseTTL() time.Duration {
	if c == nil {
		return 0
	}
	return c.cfg.LeaseTerm()
}

// Store is the record the configuration names (kiln.toml's store), "" for the data
// directory's own.
func (c *Config) Store() string {
	if c == nil {
		return ""
	}
	return c.cfg.Store
}

// HasAgent says whether the configuration names a route for the agent.
func (c *Config) HasAgent() bool { return c != nil && c.cfg.Agent.Route != "" }

// CheckRoute refuses a session's route the configuration cannot serve: one it does not
// name, or any when it runs no agent. "" is the [agent] route.
func (c *Config) CheckRoute(name string) error {
	switch {
	case name == "":
		return nil
	case !c.HasAgent():
		return fmt.Errorf("kiln: route %q: the daemon runs no agent (kiln.toml names no [agent] route)", name)
	}
	if _, ok := c.cfg.Routes[name]; !ok {
		return fmt.Errorf("kiln: route %q: kiln.toml configures no such route", name)
	}
	return nil
}

// SessionDefaults are what kiln.toml's [sessions.id] says a daemon session named id is
// opened with, its instructions file resolved against the configuration's folder; ok
// is false when it names none.
func (c *Config) SessionDefaults(id string) (d config.Session, ok bool) {
	if c == nil {
		return config.Session{}, false
	}
	d, ok = c.cfg.Sessions[id]
	d.InstructionsFile = c.cfg.InstructionsPath(d)
	return d, ok
}

// Confinement is the configuration's [sandbox] and [limits]: how every daemon session
// that gives none of its own is confined and bounded.
func (c *Config) Confinement() (config.Sandbox, limits.Session) {
	if c == nil {
		return config.Sandbox{}, limits.Session{}
	}
	return c.cfg.Sandbox, c.cfg.Limits
}

// Remotes are the remote.* targets the configuration names.
func (c *Config) Remotes() map[string]remote.Target {
	if c == nil {
		return nil
	}
	return remote.Targets(c.cfg)
}

// clientOf builds the client of the named route.
func (c *Config) clientOf(name string) (agent.Route, error) {
	r, ok := c.cfg.Routes[name]
	if !ok {
		return agent.Route{}, fmt.Errorf("kiln: no route %q is configured", name)
	}
	rc := route.Config{Name: name, Kind: r.Kind, BaseURL: r.BaseURL, Model: r.Model, Tools: r.Tools == nil || *r.Tools,
		Stream: r.Stream == nil || *r.Stream, Images: r.Kind != config.KindScript && (r.Images == nil || *r.Images), Cache: r.Cache, Timeout: time.Duration(r.TimeoutSeconds) * time.Second,
		MaxOutputTokens: r.MaxOutputTokens, Script: c.cfg.ScriptPath(r)}
	if r.APIKeyEnv != "" {
		rc.APIKey = c.secrets[r.APIKeyEnv]
	}
	client, err := route.New(rc)
	if err != nil {
		return agent.Route{}, err
	}
	window, _ := r.Window()
	return agent.Route{Name: name, Client: client, ContextTokens: window, Price: agent.Price{Input: r.Price.Input,
		CachedInput: r.Price.CachedInput, CacheWrite: r.Price.CacheWrite, Output: r.Price.Output}}, nil
}

// Options configure a workbench's agent.
type Options struct {
	Config *Config
	// Changed returns a channel closed at the record's next commit: how the agent learns
	// of inputs. A daemon passes its own; nil is the workbench's own inputs only.
	Changed func() <-chan struct{}
	// OnProgress is told each step's progress; it must not block.
	OnProgress func(Progress)
	Logger     *slog.Logger // nil: the workbench's
	// OnDelta, when set, is told the pieces of each model call's reply as its route
	// streams them (Session is left for the caller); it must not block.
	OnDelta func(live.Delta)
	// Route names the route of the agent's steps, and of its folds unless fold_route
	// names another; "" is the configuration's [agent] route.
	Route string
}

// Progress is a live line of an agent's turn.
type Progress struct {
	Turn  int64
	Step  int
	What  string // model_call, model_reply, cell, cell_done, end
	Cell  string // the cell, for cell_done
	Error string
	End   string // the end reason, for end
}

// Agent is a workbench's running agent: one actor taking the session's inputs and
// running turns on them.
type Agent struct {
	actor   *agent.Actor
	ag      *agent.Agent // touched only on the actor's goroutine (Between)
	gate    *approval.Gate
	journal agent.Journal
	done    chan struct{}
	err     error
	last    atomic.Int64 // the Unix nanoseconds of the last progress
}

// LastActive is when the agent last made progress: now while a turn runs or while it
// waits in runtime.wait, which an input or a timer ends.
func (a *Agent) LastActive() time.Time {
	if a.actor.Running() || a.actor.Waiting() {
		return time.Now()
	}
	return time.Unix(0, a.last.Load())
}

// Cancel cancels the running turn and says whether one was running; the turn ends
// cancelled.
func (a *Agent) Cancel() bool { return a.actor.Cancel() }

// Running says whether a turn runs.
func (a *Agent) Running() bool { return a.actor.Running() }

// Waiting says whether the agent waits in runtime.wait, which an input or a timer ends.
func (a *Agent) Waiting() bool { return a.actor.Waiting() }

// Decide approves or rejects the agent's held cell (its id, c-N), saying why; a cell not
// held now is approval.ErrNotHeld.
func (a *Agent) Decide(ctx context.Context, cell string, approve bool, reason string) (approval.Decision, error) {
	return a.gate.Decide(ctx, cell, approve, reason)
}

// ErrNotResumable is a resume asked of an agent whose last turn did not end host_died
// or overflow, or that runs a turn now.
var ErrNotResumable = errors.New("kiln: no turn to resume")

// Resume is the input that resumes the agent's last turn, which ended host_died or
// overflow: a line naming the turn, how it ended and its inputs (evidence.resolve reads
// them), for the operator to record as an input. The agent's next turn runs on it; a
// fold, due after an overflow, comes first.
func (a *Agent) Resume(ctx context.Context) (turn int64, text string, err error) {
	if a.Running() {
		return 0, "", fmt.Errorf("%w: a turn runs now", ErrNotResumable)
	}
	turns, err := a.journal.Turns(ctx)
	if err != nil {
		return 0, "", err
	}
	if len(turns) == 0 {
		return 0, "", fmt.Errorf("%w: the agent has run no turn", ErrNotResumable)
	}
	last := turns[len(turns)-1]
	if last.End == nil || last.End.EndReason != agent.EndHostDied && last.End.EndReason != agent.EndOverflow {
		reason := "none yet"
		if last.End != nil {
			reason = last.End.EndReason
		}
		return 0, "", fmt.Errorf("%w: turn %d ended %s; only a turn that ended host_died or overflow is resumed", ErrNotResumable, last.TurnID(), reason)
	}
	var refs []string
	if last.Start != nil {
		for _, id := range last.Start.Trigger {
			refs = append(refs, fmt.Sprintf("event:%d", id))
		}
	}
	text = fmt.Sprintf("[kiln] The operator resumes turn %d, which ended %s before its task was done. Carry on with it.", last.TurnID(), last.End.EndReason)
	if len(refs) > 0 {
		text += " Its inputs were " + strings.Join(refs, ", ") + " (evidence.resolve reads them)."
	}
	return last.TurnID(), text, nil
}

// ErrNothingToFold is a fold or a reset of an agent whose conversation since the last
// fold is empty.
var ErrNothingToFold = agent.ErrNothingToFold

// ErrFoldFailed is a fold whose model call failed or whose summary did not hold: it is
// recorded, and the conversation is kept.
var ErrFoldFailed = errors.New("kiln: the fold failed")

// Fold folds the agent's conversation now, between turns, at the operator's request:
// once the turn running and those of the inputs waiting have ended. It returns the
// fold's record; a fold that failed is recorded and is ErrFoldFailed.
func (a *Agent) Fold(ctx context.Context) (agent.Fold, error) {
	var f agent.Fold
	var err error
	if berr := a.between(ctx, func(ctx context.Context) { f, err = a.ag.FoldNow(ctx) }); berr != nil {
		return agent.Fold{}, berr
	}
	if err != nil && !errors.Is(err, agent.ErrNothingToFold) && f.Error != "" {
		return f, fmt.Errorf("%w: %s", ErrFoldFailed, f.Error)
	}
	return f, err
}

// Reset begins a new transcript segment of the agent between turns, at the operator's
// request: the conversation and its summary are dropped, the record kept. It returns
// the record that marks it.
func (a *Agent) Reset(ctx context.Context) (agent.Fold, error) {
	var f agent.Fold
	var err error
	if berr := a.between(ctx, func(ctx context.Context) { f, err = a.ag.Reset(ctx) }); berr != nil {
		return agent.Fold{}, berr
	}
	return f, err
}

// ErrStopped is an operator's request of an agent that has stopped: no turn will run
// again, so nothing runs between turns either.
var ErrStopped = errors.New("kiln: the agent has stopped")

// between runs fn on the actor between turns, as the actor's Between does, and refuses
// with ErrStopped once the agent has stopped rather than wait for ctx.
func (a *Agent) between(ctx context.Context, fn func(context.Context)) error {
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-a.done:
			cancel()
		case <-bctx.Done():
		}
	}()
	err := a.actor.Between(bctx, fn)
	if err != nil && ctx.Err() == nil {
		return ErrStopped
	}
	return err
}

// Held lists the agent's cells held for a decision now.
func (a *Agent) Held() []approval.Review { return a.gate.Held() }

// Done is closed once the agent has stopped; Err then says why, nil when ctx ended.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err is why the agent stopped, after Done.
func (a *Agent) Err() error { return a.err }

// Start starts the session's agent: it ends the turns a dead host left open
// (host_died), then runs a turn whenever the inbox wakes it, until ctx ends.
func Start(ctx context.Context, wb *session.Session, opts Options) (*Agent, error) {
	if !opts.Config.HasAgent() {
		return nil, errors.New("kiln: the configuration names no agent route")
	}
	ac := opts.Config.cfg.Agent
	if err := opts.Config.CheckRoute(opts.Route); err != nil {
		return nil, err
	}
	if opts.Route != "" {
		if ac.FoldRoute == ac.Route {
			ac.FoldRoute = opts.Route
		}
		ac.Route = opts.Route
	}
	step, err := opts.Config.clientOf(ac.Route)
	if err != nil {
		return nil, err
	}
	fold := step
	if ac.FoldRoute != ac.Route {
		if fold, err = opts.Config.clientOf(ac.FoldRoute); err != nil {
			return nil, err
		}
	}
	if opts.Logger == nil {
		opts.Logger = wb.Logger()
	}
	if opts.Changed == nil {
		opts.Changed = wb.InputsChanged
	}
	head, err := pinnedHead(ctx, wb)
	if err != nil {
		return nil, err
	}
	journal := agent.Journal{Store: wb.Store(), Session: wb.Record().ID}
	if err := seekScripts(ctx, journal, step, fold); err != nil {
		return nil, err
	}
	inbox := agent.Inbox{Store: wb.Store(), Session: wb.Record().ID, Changed: opts.Changed}
	gate, err := approval.New(wb.Store(), wb.Record().ID, ac.Review, time.Duration(ac.ReviewTimeoutSeconds)*time.Second, opts.Logger)
	if err != nil {
		return nil, err
	}
	gate.Ask(func(ctx context.Context, turn int64, cell, code string) (bool, string, bool) {
		r, ok := wb.ReviewExecution(ctx, turn, cell, code)
		return r.Action != "allow", r.Reason, ok
	})
	if err := gate.Recover(ctx, func(ctx context.Context, held approval.Review, d approval.Decision) {
		if _, err := wb.Input(context.WithoutCancel(ctx), resumeText(held, d)); err != nil {
			opts.Logger.Error("recording the decision of a hold carried over a restart", "cell", held.Cell, "err", err)
		}
	}); err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			gate.Close()
		}
	}()
	sess := &agentSession{wb: wb, journal: journal, inbox: inbox, gate: gate}
	for _, name := range []string{ac.Route, ac.FoldRoute} {
		if _, note := opts.Config.cfg.Routes[name].Window(); note != "" {
			opts.Logger.Warn("a route's window is defaulted", "route", name, "window", note)
		}
	}
	cfg := agent.Config{Step: step, Fold: fold, Header: head, MaxSteps: ac.MaxSteps, MaxTurnTokens: ac.MaxTurnTokens,
		MaxTurnCostMicro: int64(ac.MaxTurnCostUSD * 1e6), TurnDeadline: time.Duration(ac.TurnDeadlineSeconds) * time.Second,
		MaxSessionCostMicro: int64(ac.MaxSessionCostUSD * 1e6), MaxDayCostMicro: int64(ac.MaxDayCostUSD * 1e6),
		Ledger: opts.Config.ledger, FoldMarginTokens: ac.FoldMarginTokens, Logger: opts.Logger}
	if p := wb.Peers(); p != nil { // its peers' calls count toward its session cap
		cfg.Charged = func() int64 { return p.Charged(ctx, wb.Record().ID) }
	}
	a := &Agent{done: make(chan struct{}), gate: gate, journal: journal}
	a.last.Store(time.Now().UnixNano())
	cfg.OnStep = func(p agent.Progress) {
		a.last.Store(time.Now().UnixNano())
		if opts.OnProgress != nil {
			opts.OnProgress(Progress{Turn: p.Turn, Step: p.Step, What: p.What, Cell: p.Cell, Error: p.Error, End: p.End})
		}
	}
	if opts.OnDelta != nil {
		cfg.OnDelta = func(d agent.Delta) {
			opts.OnDelta(live.Delta{Turn: d.Turn, Step: d.Step, Call: d.Call, Purpose: d.Purpose, Delta: d.Kind, Text: d.Text})
		}
	}
	ag := agent.New(sess, cfg)
	if err := resume(ctx, wb, journal, ag, head); err != nil {
		return nil, err
	}
	a.ag = ag
	a.actor = agent.NewActor(ag, inbox, journal, opts.Logger)
	if err := a.actor.Recover(ctx); err != nil {
		return nil, err
	}
	wb.SetRouted()
	started = true
	go func() {
		defer close(a.done)
		defer gate.Close()
		if a.err = a.actor.Run(ctx); a.err != nil {
			opts.Logger.Error("the agent stopped", "session", wb.Name(), "err", a.err)
		}
	}()
	return a, nil
}

// resumeText is the input that tells the agent how a hold carried over a restart ended:
// the turn that wrote the cell ended with the host, and this input resumes it.
func resumeText(held approval.Review, d approval.Decision) string {
	var text string
	switch d.Decision {
	case approval.Approved:
		text = fmt.Sprintf("[kiln] The operator approved cell %s of turn %d, held when the host stopped; it has not run. "+
			"Send the same code again to run it (it is not held again), and carry on with the turn's task.", held.Cell, held.Turn)
	default:
		text = fmt.Sprintf("[kiln] Cell %s of turn %d, held when the host stopped, was %s and never ran", held.Cell, held.Turn, d.Decision)
		if d.Reason != "" {
			text += ": " + textcut.Ellipsis(d.Reason, maxResumeReason)
		}
		text += ". Carry on with the turn's task without it."
	}
	return text
}

// maxResumeReason bounds the reason a resume input repeats, in bytes, well within an
// input's bound.
const maxResumeReason = 1000

// seekScripts makes a script route go on where the session's recorded calls of it left
// it, so that a restarted session is not served its first replies again.
func seekScripts(ctx context.Context, j agent.Journal, routes ...agent.Route) error {
	turns, err := j.Turns(ctx)
	if err != nil {
		return err
	}
	for i, r := range routes {
		script, ok := r.Client.(*route.Script)
		if !ok || i > 0 && r.Client == routes[0].Client {
			continue
		}
		n := 0
		for _, t := range turns {
			for _, c := range t.Calls {
				if c.Route == r.Name {
					n++
				}
			}
		}
		script.Seek(n)
	}
	return nil
}

// resume gives a the conversation the session's record holds: the latest fold's summary
// and the transcript since the fold, as the model read it. The model's text beside its
// code is not in the transcript, so the first request after a restart does not extend
// the last one before it.
func resume(ctx context.Context, wb *session.Session, j agent.Journal, a *agent.Agent, head agent.Header) error {
	turns, err := j.Turns(ctx)
	if err != nil {
		return err
	}
	if len(turns) == 0 {
		return nil
	}
	var summary string
	for _, t := range turns {
		for _, f := range t.Folds {
			if f.Error == "" { // a failed fold kept the conversation and its summary
				summary = f.Summary
			}
		}
	}
	t, err := transcript.Load(ctx, wb.Store(), wb.Record().ID)
	if err != nil {
		return err
	}
	var conv []route.Message
	callID := ""
	for _, m := range t.Render() {
		switch m.Role {
		case transcript.RoleUser:
			conv = append(conv, route.Message{Role: route.RoleUser, Text: m.Content})
		case transcript.RoleAssistant:
			callID = fmt.Sprintf("call_r%d", m.Seq)
			args, _ := json.Marshal(map[string]string{"code": m.Content})
			conv = append(conv, route.Message{Role: route.RoleAssistant,
				Call: &route.Call{ID: callID, Arguments: string(args), Code: m.Content}})
		case transcript.RoleTool:
			conv = append(conv, route.Message{Role: route.RoleTool, CallID: callID, Text: m.Content})
		}
	}
	last := turns[len(turns)-1]
	a.Resume(head, summary, conv, last.TurnID(), len(last.Calls))
	return nil
}

// pinnedHead is the text of the transcript's newest pin: what requests carry.
func pinnedHead(ctx context.Context, wb *session.Session) (agent.Header, error) {
	t, err := transcript.Load(ctx, wb.Store(), wb.Record().ID)
	if err != nil {
		return agent.Header{}, err
	}
	var head agent.Header
	for _, l := range t.Links() {
		if l.Pin != nil {
			head = agent.Header{Text: l.Pin.Text, Digest: l.Pin.Digest}
		}
	}
	return head, nil
}

// agentSession is the agent's view of a workbench.
type agentSession struct {
	wb      *session.Session
	journal agent.Journal
	inbox   agent.Inbox
	gate    *approval.Gate
	turn    atomic.Int64 // the turn running, as its start was recorded
}

func (s *agentSession) ID() string { return s.wb.Name() }

func (s *agentSession) Pending(ctx context.Context) ([]agent.Input, error) {
	return s.inbox.Pending(ctx)
}

func (s *agentSession) Record(ctx context.Context, rec agent.Record) error {
	if start, ok := rec.(*agent.TurnStart); ok {
		s.turn.Store(start.Turn)
	}
	return s.journal.Record(ctx, rec)
}

// Execute runs a cell and gathers what the model reads of it, with the header
// observations recorded while it ran.
func (s *agentSession) Execute(ctx context.Context, code string) (agent.Cell, error) {
	before, err := s.wb.Store().LastSeq(ctx, s.wb.Record().ID)
	if err != nil {
		return agent.Cell{}, err
	}
	began := time.Now()
	turn := s.turn.Load()
	rec, err := s.wb.Execute(ctx, code, session.Watch{Gate: func(ctx context.Context, cell string) error {
		return s.gate.Review(ctx, turn, cell, code)
	}})
	if err != nil {
		return agent.Cell{}, err
	}
	c := agent.Cell{ID: rec.ID, Status: string(rec.Status), Started: began, Ended: time.Now(), NotRun: rec.NotRun}
	var out strings.Builder
	for _, o := range rec.Output {
		text := o.Text
		if o.Stream == wire.StreamDisplay {
			var img *route.Image
			text, img = displayed(o)
			if img != nil {
				c.Images = append(c.Images, *img)
			}
		}
		out.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			out.WriteString("\n")
		}
	}
	if rec.TruncatedBytes > 0 {
		fmt.Fprintf(&out, "[%d more bytes of output were not kept]\n", rec.TruncatedBytes)
	}
	c.Output = out.String()
	if rec.Error != nil {
		c.Error = *rec.Error
	}
	c.Notices, _ = s.observations(context.WithoutCancel(ctx), before) // the cell ran; a notice not read is not invented
	return c, nil
}

// displayed is what the model reads of a display item, and its image: its text/plain,
// and a line naming an image it holds (its richest of route.ImageTypes), which goes to
// the model beside the text where the route takes images.
func displayed(o wire.Output) (string, *route.Image) {
	text := o.Text
	if text == "" {
		text = o.Data["text/plain"]
	}
	for _, mime := range route.ImageTypes {
		encoded, ok := o.Data[mime]
		if !ok {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			return text, nil
		}
		line := fmt.Sprintf("[%s display, %d bytes]", mime, len(data))
		if text != "" {
			line = text + "\n" + line
		}
		return line, &route.Image{MIMEType: mime, Data: data}
	}
	return text, nil
}

// ObserveHeader looks at the instruction sources as a turn starts, before its first model
// call: a change found is recorded as the host's and rendered.
func (s *agentSession) ObserveHeader(ctx context.Context) ([]string, error) {
	before, err := s.wb.Store().LastSeq(ctx, s.wb.Record().ID)
	if err != nil {
		return nil, err
	}
	if err := s.wb.Header().Observe(ctx, transcript.Actor{Origin: transcript.OriginHost, Reason: "noticed as a turn started"}); err != nil {
		return nil, err
	}
	return s.observations(ctx, before)
}

// observations renders the header revisions recorded after seq before.
func (s *agentSession) observations(ctx context.Context, before int64) ([]string, error) {
	entries, err := s.wb.Store().Log(ctx, store.LogFilter{Session: s.wb.Record().ID, Since: before})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		pr, ok := e.Record.(store.PromptRecord)
		if !ok || pr.Type != transcript.TypeRevision {
			continue
		}
		var rev transcript.Revision
		if json.Unmarshal(pr.Body, &rev) == nil {
			out = append(out, transcript.RenderObservation(rev))
		}
	}
	return out, nil
}

// FrontierSelected reports whether a cell of the session selected a frontier
// (frontier.select) that no fold has installed yet.
func (s *agentSession) FrontierSelected(ctx context.Context) (bool, error) {
	_, found, err := s.wb.Store().PendingFrontier(ctx, s.wb.Record().ID)
	return found, err
}

// FrontierInstalled marks the session's selected frontiers installed by the fold at the
// end of turn.
func (s *agentSession) FrontierInstalled(ctx context.Context, turn int64) error {
	return s.wb.Store().InstallFrontier(ctx, s.wb.Record().ID, turn)
}

// MoveHead pins the current instruction text at a fold covering every record before
// the inputs of keep.
func (s *agentSession) MoveHead(ctx context.Context, keep []agent.Input) (agent.Header, string, error) {
	wb := s.wb
	if err := wb.Header().Observe(ctx, transcript.Actor{Origin: transcript.OriginHost, Reason: "noticed at a fold"}); err != nil {
		return agent.Header{}, "", err
	}
	t, err := transcript.Load(ctx, wb.Store(), wb.Record().ID)
	if err != nil {
		return agent.Header{}, "", err
	}
	var frontier int64
	if n := len(t.Entries); n > 0 {
		frontier = t.Entries[n-1].Seq + 1
	}
	for _, in := range keep {
		seq, err := wb.Store().EventSeq(ctx, wb.Record().ID, in.ID)
		if err != nil {
			return agent.Header{}, "", err
		}
		frontier = min(frontier, seq)
	}
	sources, err := wb.InstructionSources()
	if err != nil {
		return agent.Header{}, "", err
	}
	pin := transcript.Fold(t.Links(), frontier, sources, time.Now())
	if _, err := wb.Store().AppendPromptRecord(ctx, wb.Record().ID, pin.Type, pin.Digest, pin); err != nil {
		return agent.Header{}, "", err
	}
	return agent.Header{Text: pin.Text, Digest: pin.Digest}, pin.Reason, nil
}
