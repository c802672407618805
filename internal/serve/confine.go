package serve

import (
	"fmt"
	"time"

	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/session"
)

// config is the daemon's kiln.toml: its agent's, else a guest's.
func (d *Daemon) config() *agentrun.Config {
	if d.opts.Agent != nil {
		return d.opts.Agent
	}
	return d.opts.Config
}

// confinement completes a session's configuration with kiln.toml's [sessions.ID], then
// the daemon's, sandbox, network and resource limits where it gives none, and refuses a sandbox or network that is
// not one kiln knows.
func (d *Daemon) confinement(cfg *Config) error {
	if def, ok := d.config().SessionDefaults(cfg.ID); ok { // kiln.toml's [sessions.ID]
		if cfg.Sandbox == "" {
			cfg.Sandbox = def.Sandbox
		}
		if cfg.Network == "" {
			cfg.Network = def.Network
		}
		cfg.Limits = cfg.Limits.WithDefaults(def.Limits)
	}
	if cfg.Sandbox == "" {
		cfg.Sandbox = d.opts.Sandbox
	}
	if cfg.Network == "" {
		cfg.Network = d.opts.Network
	}
	if _, err := sandbox.ParseProfile(cfg.Sandbox); err != nil {
		return fmt.Errorf("%w: sandbox: %w", ErrInvalid, err)
	}
	if _, err := sandbox.ParseNetwork(cfg.Network); err != nil {
		return fmt.Errorf("%w: network: %w", ErrInvalid, err)
	}
	cfg.Limits = cfg.Limits.WithDefaults(d.opts.Limits)
	return nil
}

// confine sets what confines and bounds the session of cfg in its session.Config: its
// profile and network, the daemon's probe of the kernel when the profile confines,
// and its resource limits.
func (d *Daemon) confine(scfg *session.Config, cfg Config) error {
	scfg.Sandbox, scfg.Network = cfg.Sandbox, cfg.Network
	profile := cfg.Sandbox
	if profile == "" {
		profile = session.DefaultSandbox
	}
	p, err := sandbox.ParseProfile(profile)
	if err != nil {
		return fmt.Errorf("%w: sandbox: %w", ErrInvalid, err)
	}
	if p.Confines() {
		scfg.SandboxHost = d.probe()
	}
	l := cfg.Limits
	scfg.MemoryBytes, scfg.CPUSeconds, scfg.MaxProcesses = l.MemoryBytes, int(l.CPUSeconds), int(l.MaxProcesses)
	scfg.CellTimeout = time.Duration(l.WallMS) * time.Millisecond
	return nil
}

// checkLimits refuses a limit out of its bounds as ErrInvalid, naming it.
func checkLimits(l limits.Session) error {
	if err := l.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
