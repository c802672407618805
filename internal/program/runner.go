package program

import (
	"context"
	"errors"
	"fmt"
	"github.com/kilnrt/kiln/internal/scratch"
	"github.com/kilnrt/kiln/python"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/sandbox"
)

// Pool bounds.
const (
	// MaxPoolConfigs is how many boot configurations a Runner keeps warm children
	// for; a new one displaces the least recently used.
	MaxPoolConfigs = 8
	// BootTimeout bounds a warm child's boot, from spawn to boot-ack.
	BootTimeout = 30 * time.Second
	// maxBootFailures is how many boots of one configuration in a row may fail before
	// the pool stops replacing its children until a run of it boots.
	maxBootFailures = 3
)

// ErrClosed is a run started on a closed Runner.
var ErrClosed = errors.New("program: runner closed")

// Options configure a Runner.
type Options struct {
	// Python is the interpreter's executable, as interp.Find resolves it. Required.
	Python string
	// Dir is the children's working directory; empty means the host's.
	Dir string
	// Pool is how many children to keep booted ahead of time for each configuration
	// that runs; 0 starts every child on demand.
	Pool int
	// Grace is the time from SIGTERM to SIGKILL when the host ends a child; zero means
	// DefaultGrace.
	Grace time.Duration
	// Precompile compiles the kiln Python package when the Runner is made, or takes
	// its bytecode from the user's cache directory (python.Cached), so that no child
	// spends its start compiling it.
	Precompile bool
	// Logger receives debug records of dropped frames and settlements; nil discards.
	Logger *slog.Logger
	// Sandbox confines each child under SandboxHost's mechanisms: its working
	// directory is Dir, its run directory private to it, its tasks MaxProcesses more
	// than itself. A zero Sandbox confines nothing.
	Sandbox     sandbox.Policy
	SandboxHost *sandbox.Host
}

// Runner runs programs, each in a child of its own. Its methods are safe for
// concurrent use.
type Runner struct {
	opts   Options
	python string
	grace  time.Duration
	stall  time.Duration // ReplyStall; tests of heavy replies on a loaded machine lengthen it
	log    *slog.Logger
	// archive is the Python packages as an archive (python.Installer.Archive), made at
	// the first spawn's need, while that child's interpreter starts.
	archive *packages
	// convert bounds the memory the conversions of binding results into reply frames
	// take at once (MaxConvertBytes).
	convert *byteBudget

	ctx    context.Context // ends at Close: aborts runs, stops boots
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the Runner started

	mu     sync.Mutex
	closed bool
	pools  map[string]*pool
	tick   int64 // orders the pools' use
}

// A pool holds the warm children of one boot configuration.
type pool struct {
	spec     *spec
	idle     []*child
	booting  int
	failures int   // boots in a row that failed
	used     int64 // Runner.tick at its last use
}

// NewRunner returns a Runner, having removed the run directories of hosts that died
// without removing theirs (a kill -9). With opts.Precompile its children import the kiln package
// compiled, from the cache's bytecode or compiled once, as the first child starts; a
// compilation that fails fails that child's start, and the next child's start tries
// again.
func NewRunner(_ context.Context, opts Options) (*Runner, error) {
	if opts.Python == "" {
		return nil, errors.New("program: no Python interpreter given")
	}
	if opts.Pool < 0 {
		return nil, fmt.Errorf("program: pool size %d is negative", opts.Pool)
	}
	if opts.Dir == "" {
		// Named, so that a sandbox lets the children write where they run.
		dir, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("program: working directory: %w", err)
		}
		opts.Dir = dir
	}
	r := &Runner{opts: opts, python: opts.Python, grace: opts.Grace, stall: ReplyStall, log: opts.Logger,
		convert: newByteBudget(MaxConvertBytes), pools: make(map[string]*pool)}
	if r.grace <= 0 {
		r.grace = DefaultGrace
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	// The run directories of hosts killed outright, which nothing else removes.
	scratch.SweepStale(r.log)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.setInstaller(func() (*python.Installer, error) {
		if !opts.Precompile {
			return python.Sources(), nil
		}
		return python.Cached(r.ctx, opts.Python, "kiln.program")
	})
	return r, nil
}

// setInstaller has each child given the archive of the packages installer makes, made
// when a child first needs it, and again after a making that failed.
func (r *Runner) setInstaller(installer func() (*python.Installer, error)) {
	r.archive = &packages{make: func() ([]byte, error) {
		in, err := installer()
		if err != nil {
			return nil, err
		}
		return in.Archive()
	}}
}

// Run runs p once and returns how it ended. The error is for a program that cannot
// run (ErrInvalid) or a closed Runner (ErrClosed); everything that happens to the
// program, a failure to start python included, is in the Result. A ctx already done
// gives StatusAbort at once; one that ends during the run aborts it, as Close does.
//
// With a pool, the run takes a warm child booted with the same limits and namespaces,
// if one is ready, and its wall clock starts at hand-off; otherwise it starts a child,
// and the wall clock starts just before the spawn. The pool replaces the child once
// the run has settled.
//
// A run that completes (a done frame) returns as soon as its result and logs are
// known and its process group has been sent SIGKILL: reaping the group and removing
// the run directory finish in the background, and Close waits for them. A run the
// host ends (timeout, abort, a protocol breach) or that python ends returns once all
// of that is done.
func (r *Runner) Run(ctx context.Context, p Program) (Result, error) {
	s, err := newSpec(p)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return aborted(ctx, 0), nil
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Result{}, ErrClosed
	}
	var c *child
	pl := r.poolLocked(s)
	if pl != nil {
		c = r.takeLocked(pl)
	}
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()
	// Asked of the kernel outside r.mu: reads of /proc. Python behind its init is 0 once
	// the init has reaped it.
	for c != nil && (dying(c.proc.Pid()) || dying(c.proc.Program())) {
		r.discard(c)
		r.mu.Lock()
		c = r.takeLocked(pl)
		r.mu.Unlock()
	}
	if pl != nil {
		// Replace the child once the run has settled, not while it runs: a boot
		// competes for the CPU with the run it would slow down.
		defer func() {
			r.mu.Lock()
			r.refillLocked(pl)
			r.mu.Unlock()
		}()
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(r.ctx, stop)()

	if c != nil {
		return c.run(ctx, s, time.Now()), nil
	}
	c, err = r.spawn(ctx, s)
	if ctx.Err() != nil && err != nil { // while the packages were made
		return aborted(ctx, time.Since(start)), nil
	}
	if err != nil {
		res := workerExit(err.Error())
		res.Logs, res.Wall = []string{}, time.Since(start)
		return res, nil
	}
	// The Runner's own setup, the archive its first spawn made, is not the run's.
	res := c.run(ctx, s, start.Add(c.setup))
	if pl != nil && c.acked {
		r.mu.Lock()
		pl.failures = 0 // the configuration boots: let the pool try again
		r.mu.Unlock()
	}
	return res, nil
}

// aborted is the Result of a run that ctx ended before it had a child, after wall.
func aborted(ctx context.Context, wall time.Duration) Result {
	return Result{Status: StatusAbort, Error: "run aborted: " + context.Cause(ctx).Error(), Logs: []string{}, Wall: wall}
}

// Warm fills the pool for p's configuration and waits until it is full, or ctx ends:
// the runs of p that follow start on warm children. Without a pool it does nothing.
func (r *Runner) Warm(ctx context.Context, p Program) error {
	s, err := newSpec(p)
	if err != nil {
		return err
	}
	for first := true; ; first = false {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return ErrClosed
		}
		pl := r.poolLocked(s)
		if pl == nil {
			r.mu.Unlock()
			return nil
		}
		if first {
			pl.failures = 0 // asked for: try again
		}
		r.refillLocked(pl)
		full := len(pl.idle) >= r.opts.Pool
		failing := pl.failures >= maxBootFailures
		r.mu.Unlock()
		switch {
		case full:
			return nil
		case failing:
			return errors.New("program: warm children of this configuration do not boot")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// poolLocked returns the pool for s's configuration, making it (and displacing the
// least recently used beyond MaxPoolConfigs); nil without a pool. r.mu held.
func (r *Runner) poolLocked(s *spec) *pool {
	if r.opts.Pool == 0 {
		return nil
	}
	r.tick++
	key := s.key
	pl := r.pools[key]
	if pl == nil {
		if len(r.pools) >= MaxPoolConfigs {
			var oldest string
			for k, p := range r.pools {
				if oldest == "" || p.used < r.pools[oldest].used {
					oldest = k
				}
			}
			r.drainLocked(r.pools[oldest])
			delete(r.pools, oldest)
		}
		pl = &pool{spec: s}
		r.pools[key] = pl
	}
	pl.used = r.tick
	return pl
}

// takeLocked returns an idle child of pl not seen to have died, or nil; the dead ones
// it finds it discards. Run asks the kernel whether the child it took is dying, outside
// r.mu. r.mu held.
func (r *Runner) takeLocked(pl *pool) *child {
	for len(pl.idle) > 0 {
		c := pl.idle[0]
		pl.idle = pl.idle[1:]
		if c.alive() {
			return c
		}
		r.discard(c)
	}
	return nil
}

// discard ends c in the background.
func (r *Runner) discard(c *child) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		c.discard()
	}()
}

// refillLocked boots children until the pool has its size, idle or booting. r.mu held.
func (r *Runner) refillLocked(pl *pool) {
	if r.pools[pl.spec.key] != pl {
		return // displaced
	}
	for !r.closed && pl.failures < maxBootFailures && len(pl.idle)+pl.booting < r.opts.Pool {
		pl.booting++
		r.wg.Add(1)
		go r.bootOne(pl)
	}
}

// bootOne boots a child for pl and parks it.
func (r *Runner) bootOne(pl *pool) {
	defer r.wg.Done()
	c, err := r.spawn(r.ctx, pl.spec)
	if err == nil {
		if err = c.awaitAck(r.ctx, BootTimeout); err != nil {
			c.discard()
		}
	}
	r.mu.Lock()
	pl.booting--
	if err != nil {
		pl.failures++
		r.mu.Unlock()
		r.log.Debug("warm child did not boot", "err", err)
		return
	}
	pl.failures = 0
	if r.closed || r.pools[pl.spec.key] != pl {
		r.mu.Unlock()
		c.discard()
		return
	}
	pl.idle = append(pl.idle, c)
	r.mu.Unlock()
}

// drainLocked discards pl's idle children in the background. r.mu held.
func (r *Runner) drainLocked(pl *pool) {
	for _, c := range pl.idle {
		r.discard(c)
	}
	pl.idle = nil
}

// Close aborts the runs in progress, ends every warm child, and returns once every
// child has been reaped and every goroutine of the Runner has returned: the bindings'
// own goroutines aside, which it abandons once their runs have settled.
func (r *Runner) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for _, pl := range r.pools {
		r.drainLocked(pl)
	}
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}
