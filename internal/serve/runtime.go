package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/approval"
	"github.com/kilnrt/kiln/internal/instructions"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/live"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/tools"
	"github.com/kilnrt/kiln/internal/wire"
)

// python is the interpreter a session of cfg runs: its own, else the daemon's default.
func (d *Daemon) python(cfg Config) string {
	switch {
	case cfg.Python != "":
		return cfg.Python
	case d.opts.Python != "":
		return d.opts.Python
	}
	return session.DefaultPython(os.Getenv)
}

// openSession is the daemon's Opener: it builds the session cfg describes with
// internal/session, on the daemon's record, and starts its agent when the daemon's
// configuration names one.
func (d *Daemon) openSession(ctx context.Context, cfg Config, record *store.Store) (Runtime, error) {
	opts := d.opts
	scfg := session.Config{ID: cfg.ID, DataDir: opts.Dir, Hide: d.recordSockets, Store: record, Workspace: opts.Workspace,
		Python: cfg.Python, Packages: &d.packages, Zygotes: d.zygotes, Logger: opts.Logger, Remotes: opts.Agent.Remotes(),
		RemoteTokens:   opts.Agent.Secret,
		StartTimeout:   time.Duration(cfg.Limits.StartTimeoutMS) * time.Millisecond,
		InterruptGrace: time.Duration(cfg.Limits.InterruptGraceMS) * time.Millisecond,
		ToolTimeout:    time.Duration(cfg.Limits.ToolTimeoutMS) * time.Millisecond}
	if err := d.confine(&scfg, cfg); err != nil {
		return nil, err
	}
	scfg.Python = d.python(cfg)
	dir, err := d.workDir(cfg)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		// The session's directory is its workspace: none shares another's files.
		scfg.Dir, scfg.Workspace, scfg.SkillsDir = dir, dir, skills.BuiltinRoot(os.Getenv, opts.Workspace)
	}
	if len(cfg.Env) > 0 {
		scfg.Env = os.Environ()
		for k, v := range cfg.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return nil, fmt.Errorf("%w: env %q is not a variable name and value", ErrInvalid, k)
			}
			scfg.Env = append(scfg.Env, k+"="+v)
		}
	}
	for _, m := range cfg.MCP {
		scfg.MCP = append(scfg.MCP, tools.Server{Name: m.Name, Command: m.Command, URL: m.URL, Env: scfg.Env})
	}
	if named, ok := sessionInstructions(cfg); ok {
		scfg.Instructions = append(scfg.Instructions, named)
	}
	if p := d.peers.Load(); p != nil { // a guest serves no peers
		isPeer, err := p.IsPeer(ctx, cfg.ID)
		if err != nil {
			return nil, err
		}
		if isPeer {
			named, err := instructions.ParseNamed("peer=" + p.ContractPath())
			if err != nil {
				return nil, fmt.Errorf("kiln: %w", err)
			}
			scfg.Instructions = append(scfg.Instructions, named)
		}
		scfg.Peers = p
	}
	if err := opts.Agent.CheckRoute(cfg.Route); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s, err := session.Open(ctx, scfg)
	if errors.Is(err, sandbox.ErrProfile) {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err) // the request's sandbox and network do not go together
	}
	if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, session.ErrLimitUnavailable) {
		return nil, fmt.Errorf("%w: %w", ErrCannotApply, err)
	}
	if errors.Is(err, tools.ErrUnavailable) || errors.Is(err, tools.ErrInvalidTool) {
		return nil, fmt.Errorf("%w: the session's mcp servers: %w", ErrInvalid, err) // the request named them
	}
	if cfg.Python != "" && (errors.Is(err, interp.ErrUnsupported) || errors.Is(err, interp.ErrNotFound)) {
		return nil, fmt.Errorf("%w: the session's python: %w", ErrInvalid, err) // the request named it
	}
	if err != nil {
		return nil, err
	}
	rt := &runtime{s: s}
	if opts.Agent.HasAgent() {
		actx, stop := context.WithCancel(context.Background())
		record := s.Record().ID
		publish := func(dl live.Delta) {
			dl.Session = cfg.ID
			d.live.Publish(record, dl)
		}
		if rt.agent, err = agentrun.Start(actx, s, agentrun.Options{Config: opts.Agent, Route: cfg.Route, Logger: opts.Logger,
			OnDelta: publish}); err != nil {
			stop()
			s.Close()
			return nil, err
		}
		rt.stopAgent = stop
		rt.forget = func() { d.live.Forget(record) }
	}
	return rt, nil
}

// runtime is a session as a daemon session's Runtime.
type runtime struct {
	s *session.Session

	agent     *agentrun.Agent // the session's agent, nil when none is configured
	stopAgent context.CancelFunc
	forget    func() // drops what the agent's calls streamed, once it has stopped
}

// Execute runs a client's cell, telling started of its own cell's start alone. A
// session running the agent's cell is ErrBusy.
func (r *runtime) Execute(ctx context.Context, code string, started func(cell, generation string), output func(wire.Output), outputDone func(),
	ended func(e store.Execution, fresh bool)) error {
	_, err := r.s.Execute(ctx, code, session.Watch{Started: started,
		Output: func(_ string, o wire.Output) { output(o) }, OutputDone: outputDone,
		Ended: func(e store.Execution, previousGeneration string) {
			if previousGeneration != "" || e.CellID == "c-1" { // else whether its namespace is fresh is unknown
				ended(e, previousGeneration != "" && previousGeneration != e.Generation)
			}
		}})
	if errors.Is(err, session.ErrBusy) {
		err = fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return err
}

func (r *runtime) Input(ctx context.Context, text string) (int64, error) { return r.s.Input(ctx, text) }

func (r *runtime) Generation() string { return r.s.Generation() }

// Deliver decides the attention of an input another session recorded for this one, and
// wakes the agent.
func (r *runtime) Deliver(ctx context.Context, ev store.Event) error { return r.s.Deliver(ctx, ev) }

// AgentActivity says what the agent does: a turn runs, it waits in runtime.wait, or neither.
func (r *runtime) AgentActivity() string {
	switch {
	case r.agent == nil || !r.agent.Running() && !r.agent.Waiting():
		return peer.ActivityIdle
	case r.agent.Running():
		return peer.ActivityWorking
	}
	return peer.ActivityWaiting
}

func (r *runtime) Dir() string { return r.s.Dir() }

// Sandbox is what confines the session's live generation.
func (r *runtime) Sandbox() *sandbox.Applied { return r.s.Sandbox() }

func (r *runtime) Close() error {
	if r.agent != nil {
		r.stopAgent()
		<-r.agent.Done()
		r.forget()
	}
	return r.s.Close()
}

// LastActive is when the session's agent was last active: now during a turn.
func (r *runtime) LastActive() time.Time {
	if r.agent == nil {
		return time.Time{}
	}
	return r.agent.LastActive()
}

// Decide approves or rejects the agent's held cell.
func (r *runtime) Decide(ctx context.Context, cell string, approve bool, reason string) (approval.Decision, error) {
	if r.agent == nil {
		return approval.Decision{}, ErrNoAgent
	}
	return r.agent.Decide(ctx, cell, approve, reason)
}

// ResumeTurn records the input that resumes the agent's last turn, which ended host_died
// or overflow, and returns that turn and the input's event id.
func (r *runtime) ResumeTurn(ctx context.Context) (turn, input int64, err error) {
	if r.agent == nil {
		return 0, 0, ErrNoAgent
	}
	turn, text, err := r.agent.Resume(ctx)
	if errors.Is(err, agentrun.ErrNotResumable) {
		return 0, 0, fmt.Errorf("%w: %w", ErrNotResumable, err)
	}
	if err != nil {
		return 0, 0, err
	}
	input, err = r.s.Input(ctx, text)
	return turn, input, err
}

// Fold folds the agent's conversation now, between turns.
func (r *runtime) Fold(ctx context.Context) (agent.Fold, error) {
	if r.agent == nil {
		return agent.Fold{}, ErrNoAgent
	}
	return foldErr(r.agent.Fold(ctx))
}

// Reset begins a new transcript segment of the agent, between turns.
func (r *runtime) Reset(ctx context.Context) (agent.Fold, error) {
	if r.agent == nil {
		return agent.Fold{}, ErrNoAgent
	}
	return foldErr(r.agent.Reset(ctx))
}

// foldErr is the serve error of agentrun's fold or reset error.
func foldErr(f agent.Fold, err error) (agent.Fold, error) {
	switch {
	case errors.Is(err, agentrun.ErrNothingToFold):
		return f, fmt.Errorf("%w: %w", ErrNothingToFold, err)
	case errors.Is(err, agentrun.ErrFoldFailed):
		return f, fmt.Errorf("%w: %w", ErrFoldFailed, err)
	case errors.Is(err, agentrun.ErrStopped):
		return f, fmt.Errorf("%w: %w", ErrStopped, err)
	}
	return f, err
}

// Held lists the agent's cells held for a decision.
func (r *runtime) Held() []approval.Review {
	if r.agent == nil {
		return nil
	}
	return r.agent.Held()
}

// CancelTurn cancels the agent's running turn; false when none runs.
func (r *runtime) CancelTurn() bool { return r.agent != nil && r.agent.Cancel() }

// WakeAgents opens every open session's runtime, so that each agent takes the inputs
// and timers that wait for it and ends the turns a dead daemon left open. It does
// nothing when the daemon's configuration names no agent.
func (d *Daemon) WakeAgents(ctx context.Context) {
	if !d.opts.Agent.HasAgent() {
		return
	}
	for _, info := range d.Sessions() {
		if info.State != StateOpen || info.HeldBy != "" {
			continue
		}
		s, err := d.Session(info.ID)
		if err == nil {
			err = s.Open(ctx)
		}
		if err != nil && !errors.Is(err, ErrHeldElsewhere) { // another daemon opened it first
			d.log.Warn("starting a session's agent", "session", info.ID, "err", err)
		}
	}
}

// pseudoFS says whether dir, its symlinks followed, is in /proc, /sys or /dev: no place
// for a session's files.
func pseudoFS(dir string) bool {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	for _, fs := range []string{"/proc", "/sys", "/dev"} {
		if real == fs || strings.HasPrefix(real, fs+"/") {
			return true
		}
	}
	return false
}
