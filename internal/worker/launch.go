package worker

import (
	"context"

	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/zygote"
)

// Forker forks a generation's process from one that has the worker loaded
// (internal/zygote's Pool). An error means it did not: the generation is spawned.
type Forker interface {
	Fork(ctx context.Context, r zygote.Request) (*proc.Process, sandbox.Applied, error)
}

// launch starts the generation's process c, running module with args: forked when
// cfg.Forker can, spawned otherwise. What applied says which, and why not forked. A
// spawned process imports the package from its own copy, installed under the
// generation's directory; a forked one has it imported already, from its zygote.
func (w *Worker) launch(ctx context.Context, module string, args []string, c proc.Command) (*proc.Process, sandbox.Applied, error) {
	cfg := w.cfg
	notForked := ""
	if cfg.Forker != nil && cfg.Role == wire.RoleWorkbench {
		p, applied, err := cfg.Forker.Fork(ctx, zygote.Request{Python: cfg.Python, Package: cfg.Package, Dir: w.dir,
			Module: module, Args: args, Command: c, Sandbox: policyOf(cfg, w.dir), Host: cfg.SandboxHost})
		if err == nil {
			applied.Start = sandbox.StartForked
			return p, applied, nil
		}
		if ctx.Err() != nil {
			return nil, sandbox.Applied{}, ctx.Err()
		}
		notForked = err.Error()
		w.log.Info("the generation is spawned, not forked", "err", err)
	}
	if err := cfg.Package.Install(w.dir); err != nil {
		return nil, sandbox.Applied{}, err
	}
	p, applied, err := cfg.SandboxHost.Start(ctx, policyOf(cfg, w.dir), c)
	applied.Start, applied.NotForked = sandbox.StartSpawned, notForked
	return p, applied, err
}
