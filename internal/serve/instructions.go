package serve

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kilnrt/kiln/internal/instructions"
)

// withDefaults is cfg with what kiln.toml's [sessions.ID] says of the fields cfg leaves
// empty: the route, and the instructions when cfg gives neither a text nor a file. A
// relative instructions file is made absolute against the daemon's workspace.
func (d *Daemon) withDefaults(cfg Config) (Config, error) {
	if def, ok := d.opts.Agent.SessionDefaults(cfg.ID); ok {
		if cfg.Route == "" {
			cfg.Route = def.Route
		}
		if cfg.Instructions == "" && cfg.InstructionsFile == "" {
			cfg.Instructions, cfg.InstructionsFile = def.Instructions, def.InstructionsFile
		}
	}
	switch {
	case cfg.Instructions != "" && cfg.InstructionsFile != "":
		return cfg, fmt.Errorf("%w: a session's instructions are a text or a file (instructions_file), not both", ErrInvalid)
	case cfg.Instructions != "":
		if err := instructions.CheckText(cfg.Instructions); err != nil {
			return cfg, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	case cfg.InstructionsFile != "":
		if !filepath.IsAbs(cfg.InstructionsFile) {
			cfg.InstructionsFile = filepath.Join(d.opts.Workspace, cfg.InstructionsFile)
		}
		if fi, err := os.Stat(cfg.InstructionsFile); err != nil || !fi.Mode().IsRegular() {
			return cfg, fmt.Errorf("%w: instructions_file %q is not a regular file", ErrInvalid, cfg.InstructionsFile)
		}
	}
	return cfg, nil
}

// sessionInstructions is the session's own instruction source, if cfg gives one.
func sessionInstructions(cfg Config) (instructions.Named, bool) {
	if cfg.Instructions == "" && cfg.InstructionsFile == "" {
		return instructions.Named{}, false
	}
	return instructions.Named{Name: instructions.SessionSource, Path: cfg.InstructionsFile, Text: cfg.Instructions}, true
}
