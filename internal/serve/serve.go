// Package serve is the core of kiln's daemon: sessions that outlive the clients that
// use them, each holding one runtime (a workbench) and running one cell at a time; the
// daemon's lease on its data directory; its durable list of sessions; and recovery after
// a crash, which closes the cells the dead daemon was running with records the host
// makes, and lists its sessions again.
//
// Events are the journal of the durable record: a session's event stream is its journal
// entries after a sequence number, read from the store and woken by each commit, so a
// reader at any pace never holds up a cell, and a reader that reconnects with the last
// sequence it saw misses nothing.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kilnrt/kiln/internal/admission"
	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/datadir"
	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/live"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/session"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/store/postgres"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/internal/zygote"
)

// MaxOpenSessions bounds the sessions a daemon holds open at once, whatever the memory:
// each holds a Python process and its descriptors. Stopped sessions do not count. Below
// it, a session opens only while the host has the memory for it (package admission).
const MaxOpenSessions = 4096

// DefaultIdleTimeout is how long a session with nothing running is held before the
// daemon stops it, unless the daemon or the session sets another.
const DefaultIdleTimeout = time.Hour

// DefaultKeyTTL is how long the record holds an idempotency key, unless the daemon sets
// another: a key given again after it runs its code again.
const DefaultKeyTTL = 24 * time.Hour

// Errors a caller tells apart with errors.Is.
var (
	ErrNoSession  = errors.New("serve: no such session")
	ErrNoCell     = errors.New("serve: no such execution")
	ErrExists     = errors.New("serve: the session is open")
	ErrStopped    = errors.New("serve: the session is stopped")
	ErrBusy       = errors.New("serve: a cell is running in the session")
	ErrNotRunning = errors.New("serve: the execution is not running")
	ErrClosed     = errors.New("serve: the daemon is stopping")
	ErrTooMany    = fmt.Errorf("serve: the daemon holds %d open sessions, its most", MaxOpenSessions)
	ErrInvalid    = errors.New("serve: invalid request")
	// ErrKeyReused is an idempotency key given again with other code.
	ErrKeyReused = errors.New("serve: the idempotency key was used for other code")
	// ErrCannotApply is a session's sandbox profile or limit that this host cannot
	// give: the kernel lacks a mechanism, or the profile has none for the limit. The
	// error names what is missing.
	ErrCannotApply = errors.New("serve: the session asks what this host cannot apply")
)

// DaemonLeaseKey is the key of the lease a data directory's one daemon holds in its record.
const DaemonLeaseKey = "daemon:serve"

// ErrLeased is a data directory another living daemon holds.
var ErrLeased = errors.New("serve: the data directory is held by another daemon")

// Runtime is one session's Python runtime as the daemon drives it.
type Runtime interface {
	// Execute runs code as the session's next cell. started is told the cell's id and
	// generation once its start is recorded, before it runs, and never after Execute
	// returns; when it is never told, the cell did not run and the error says why (a
	// runtime busy with a cell of its own is ErrBusy). output is told each piece of stdout and
	// stderr and each display as it comes, on one goroutine, within the cell's bounds;
	// outputDone is told once the last piece has been, before the cell's end is
	// recorded. ended, when the runtime can tell it, is told the cell's execution as the
	// durable record reads once its end is recorded, with no read of it, and whether it
	// is the first of a new generation after earlier cells. Cancelling ctx interrupts
	// the cell.
	Execute(ctx context.Context, code string, started func(cell, generation string), output func(wire.Output), outputDone func(),
		ended func(e store.Execution, fresh bool)) error
	// Input records text as an input on the operator lane and returns its event id.
	Input(ctx context.Context, text string) (int64, error)
	// Generation is the current generation, "" when none is live.
	Generation() string
	// Dir is the directory the session's cells run in, absolute.
	Dir() string
	Close() error
}

// Opener opens the runtime of the session cfg describes, on the daemon's record.
type Opener func(ctx context.Context, cfg Config, record *store.Store) (Runtime, error)

// Options configure a daemon.
type Options struct {
	Dir string // the data directory
	// Store is the record: a postgres:// URL (see package postgres), which other
	// daemons may share (see shared.go), or "" for the SQLite file of Dir.
	Store string
	// LeaseTTL is the term of the daemon's leases on a shared record, which it renews
	// every third of it: a daemon that dies leaves its sessions to the others once it
	// ends. 0 is DefaultLeaseTTL; a term is refused for a record of one daemon.
	LeaseTTL  time.Duration
	Workspace string           // the skills' workspace root, and a guest's sessions', absolute
	Python    string           // the sessions' default interpreter
	Agent     *agentrun.Config // the sessions' agent; nil (or one naming no route) runs none
	// Config, where Agent is nil, is the configuration whose [sessions.ID] sandbox,
	// network and limits complete each session's, as Agent's do: a guest's, which runs
	// no agent.
	Config *agentrun.Config
	// Sandbox and Network confine every session's workers and commands, as
	// session.Config's do; SandboxHost is the daemon's probe of the kernel, nil to
	// probe per session.
	Sandbox, Network string
	SandboxHost      *sandbox.Host
	// Limits are the resource limits of a session that gives none of its own
	// (memory_bytes, cpu_seconds, wall_ms, max_processes; kiln.toml's [sessions]).
	Limits      limits.Session
	Open        Opener        // opens a session's runtime; default a session of internal/session
	IdleTimeout time.Duration // default DefaultIdleTimeout; negative holds sessions until stopped
	KeyTTL      time.Duration // how long idempotency keys are held; default DefaultKeyTTL
	// Clock is what a session's idleness is measured by; nil is time.Now. The idle
	// timer's wait is real time still: a clock ahead of it makes the next check sooner.
	Clock func() time.Time
	// Retention is how long a stopped session stays listed: the daemon prunes the
	// sessions stopped longer ago, as Prune does, while it runs. 0 keeps them until a prune.
	Retention time.Duration
	// Guest serves sessions of its own beside the directory's daemon or other guests:
	// it takes no lease on the directory, lists no session of another process, and
	// keeps no session files. Each session is still held by one process at a time.
	Guest  bool
	Logger *slog.Logger // nil discards
	// MemAvailable is the memory the host has available for new work, in bytes;
	// nil reads the kernel's figure (admission.Available).
	MemAvailable func() (int64, error)
	// OnStop, when set, is told of each session stopped — by a client, for idleness, by
	// its parent — once its runtime is closed; not of sessions a daemon's shutdown ends.
	OnStop func(ctx context.Context, id, reason string)
	// WorkspaceRoot, when set, is the directory inside which a client may name a
	// session's cwd; without it, each session runs in a directory of its own under the
	// data directory and a client's cwd is refused.
	WorkspaceRoot string
}

// Daemon holds the sessions of one data directory.
type Daemon struct {
	opts   Options
	lease  *store.Lease
	store  *store.Store
	states states
	log    *slog.Logger

	peers    atomic.Pointer[peer.Service] // the daemon's peers, whose methods its sessions serve; nil for a guest
	packages session.Packages             // the workers' Python package, compiled once per interpreter
	zygotes  *zygote.Pool                 // the zygotes the sessions' workbenches are forked from; nil spawns
	probe    func() *sandbox.Host         // the kernel's mechanisms, probed once, at the first confined session
	// recordSockets are the directories of the sockets of the record's database server,
	// hidden from the sessions' children.
	recordSockets []string
	live          live.Hub // what the sessions' model calls stream, for their event streams

	runCtx   context.Context // the context cells run in; cancelled as the daemon stops
	stopRun  context.CancelFunc
	retained chan struct{} // closed once the retention's pruning has ended; nil without a retention
	watched  chan struct{} // closed once the watch for sessions to take over has ended; nil on a record of one daemon

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool        // no session is created: the daemon is shutting down
	closing  atomic.Bool // closed, read by a session under its own lock rather than mu

	shutOnce  sync.Once
	closeOnce sync.Once
}

// Start takes the lease on opts.Dir, opens its record, and recovers the sessions an
// earlier daemon held: cells it was running when it died are closed with host-made
// records, and its open sessions are listed again, to start a new generation at their
// next cell.
func Start(ctx context.Context, opts Options) (_ *Daemon, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.KeyTTL <= 0 {
		opts.KeyTTL = DefaultKeyTTL
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("serve: data directory: %w", err)
	}
	if err := checkLimits(opts.Limits); err != nil {
		return nil, fmt.Errorf("serve: the sessions' default limits: %w", err)
	}
	if err := CheckLeaseTTL(opts.LeaseTTL, opts.Store != ""); err != nil {
		return nil, err
	}
	if opts.Store != "" && opts.LeaseTTL == 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	d := &Daemon{opts: opts, log: opts.Logger, sessions: map[string]*Session{}}
	if os.Getenv(zygote.Env) != zygote.Off {
		d.zygotes = zygote.NewPool(opts.Logger)
	}
	d.probe = sync.OnceValue(func() *sandbox.Host {
		if opts.SandboxHost != nil {
			return opts.SandboxHost
		}
		return sandbox.Probe(context.WithoutCancel(ctx), opts.Logger)
	})
	if !opts.Guest {
		d.states.dir = filepath.Join(opts.Dir, stateDir)
	}
	if d.opts.Open == nil {
		d.opts.Open = d.openSession
	}
	if d.store, err = openStore(ctx, opts, store.LeaseTerms{TTL: opts.LeaseTTL, Lost: d.leaseLost}); err != nil {
		return nil, err
	}
	if opts.Store != "" {
		if d.recordSockets, err = postgres.SocketDirs(opts.Store); err != nil {
			d.store.Close()
			return nil, err
		}
	}
	d.dropSecrets()
	if d.shared() && !opts.Guest {
		d.states.rec = d.store
	}
	defer func() {
		if err != nil {
			d.store.Close()
		}
	}()
	d.runCtx, d.stopRun = context.WithCancel(context.Background())
	if opts.Guest {
		return d, nil
	}
	if d.lease, err = d.store.AcquireLease(ctx, d.daemonLeaseKey()); err != nil {
		d.stopRun()
		if errors.Is(err, store.ErrLeaseHeld) {
			return nil, fmt.Errorf("%w: %w (socket %s)", ErrLeased, err, filepath.Join(opts.Dir, "kiln.sock"))
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			d.lease.Release(context.WithoutCancel(ctx))
		}
	}()
	if err := d.recover(ctx); err != nil {
		d.stopRun()
		return nil, err
	}
	if opts.Retention > 0 {
		d.retained = make(chan struct{})
		go d.retain(opts.Retention)
	}
	if d.shared() {
		d.watched = make(chan struct{})
		go d.watchLeases()
	}
	return d, nil
}

// dropSecrets takes out of the daemon's environment the secrets it holds elsewhere, so
// that no process it starts (a worker, the zygote a worker's /proc/self/environ shows,
// a workspace.run or MCP server command, a program) is given them: the password of a
// record on PostgreSQL, which the store holds, and the keys and tokens kiln.toml's
// routes and remotes name, which the configuration read as it loaded. A session's
// environment is its own.
func (d *Daemon) dropSecrets() {
	names := d.config().SecretEnv()
	if d.opts.Store != "" {
		names = append(names, "PGPASSWORD")
	}
	for _, name := range names {
		os.Unsetenv(name)
	}
}

// maxRetainInterval bounds the time between two prunes of a retention.
const maxRetainInterval = time.Minute

// retain prunes the sessions stopped more than age ago, now and then until the daemon
// stops: at a quarter of age, at most maxRetainInterval.
func (d *Daemon) retain(age time.Duration) {
	defer close(d.retained)
	tick := time.NewTicker(min(age/4+1, maxRetainInterval))
	defer tick.Stop()
	for {
		if gone, err := d.Prune(age); err != nil {
			d.log.Warn("pruning the sessions past the retention", "err", err)
		} else if len(gone) > 0 {
			d.log.Info("pruned the sessions past the retention", "sessions", gone, "retention", age)
		}
		select {
		case <-d.runCtx.Done():
			return
		case <-tick.C:
		}
	}
}

// openStore opens the daemon's record: opts.Store's database, whose leases take terms,
// else Dir's SQLite file.
func openStore(ctx context.Context, opts Options, terms store.LeaseTerms) (*store.Store, error) {
	so := store.Options{Logger: opts.Logger}
	var st *store.Store
	var err error
	if opts.Store == "" {
		st, err = store.OpenDir(ctx, opts.Dir, so)
	} else {
		so.Lease = terms
		st, err = postgres.OpenStore(ctx, opts.Store, so)
	}
	if errors.Is(err, store.ErrSchemaTooNew) {
		return nil, fmt.Errorf("serve: a newer kiln wrote the record, which this one leaves as it is; run a kiln as new as that one: %w", err)
	}
	return st, err
}

// SetPeers makes p the peers whose methods the daemon's sessions serve, from the next
// session opened: set it before any opens.
func (d *Daemon) SetPeers(p *peer.Service) { d.peers.Store(p) }

// Store is the daemon's durable record, for reads.
func (d *Daemon) Store() *store.Store { return d.store }

// Live is what the sessions' model calls stream as they run (model.delta), by the
// store's id of each session.
func (d *Daemon) Live() *live.Hub { return &d.live }

// Dir is the daemon's data directory.
func (d *Daemon) Dir() string { return d.opts.Dir }

// recover lists again the sessions of the session files and closes the cells the
// previous daemon left running.
func (d *Daemon) recover(ctx context.Context) error {
	sts, errs := d.states.load()
	for _, err := range errs {
		d.log.Warn("skipping a session file", "err", err)
	}
	for _, st := range sts {
		sess, _, err := d.store.EnsureSession(ctx, st.Config.ID)
		if err != nil {
			return err
		}
		if st.State == StateOpen {
			taken, err := d.closeAbandoned(ctx, st.Config.ID, sess.ID)
			if err != nil {
				return err
			}
			if !taken && d.shared() {
				continue // another daemon's: read from the record when asked
			}
		}
		if st.State == StateStopped && d.shared() {
			continue // read from the record when asked
		}
		s := d.newSession(st, sess.ID)
		if st.State == StateOpen {
			s.touch()
		}
		d.sessions[st.Config.ID] = s
	}
	return nil
}

// closeAbandoned records as failed the cells of session a dead host left running, as
// the session's next host, and says whether it could; a session another living kiln
// holds is left to it.
func (d *Daemon) closeAbandoned(ctx context.Context, name string, session int64) (bool, error) {
	lease, err := d.store.AcquireLease(ctx, store.SessionLeaseKey(name))
	if errors.Is(err, store.ErrLeaseHeld) {
		d.log.Info("a session another kiln holds is left to it", "session", name, "err", err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, d.endAbandoned(ctx, name, session, lease)
}

// endAbandoned records as failed the cells of session the previous host left running,
// holding its lease, which it then releases.
func (d *Daemon) endAbandoned(ctx context.Context, name string, session int64, lease *store.Lease) error {
	cells, err := d.store.EndAbandoned(ctx, session)
	if len(cells) > 0 {
		d.log.Warn("cells the previous daemon left running are recorded failed", "session", name, "executions", cells)
	}
	return errors.Join(err, lease.Release(ctx))
}

// Create opens session cfg.ID and starts its runtime. A stopped session of that id is
// opened again, and a session the record holds but the daemon does not is continued,
// each in a new generation; an open one is ErrExists, or a *SettingsError when cfg
// gives a setting it holds otherwise (Config.Differs). A session of that id still
// stopping is waited for, until ctx ends: its runtime holds the session's lease.
func (d *Daemon) Create(ctx context.Context, cfg Config) (*Session, error) {
	asked := cfg
	if !wire.ValidIdentifier(cfg.ID) {
		return nil, fmt.Errorf("%w: session id %q is not 1..128 of [A-Za-z0-9_.-]", ErrInvalid, cfg.ID)
	}
	if cfg.ID == "." || cfg.ID == ".." { // a path segment URLs and clients fold away
		return nil, fmt.Errorf("%w: session id %q is a path segment, which no client could name", ErrInvalid, cfg.ID)
	}
	if err := checkLimits(cfg.Limits); err != nil {
		return nil, err
	}
	if err := d.confinement(&cfg); err != nil {
		return nil, err
	}
	if err := checkMCP(cfg.MCP); err != nil {
		return nil, err
	}
	cfg, err := d.withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	available, err := d.memAvailable()
	if err != nil {
		d.log.Debug("the host's available memory is unknown: sessions are bounded by number alone", "err", err)
		available = -1
	}
	s, prev, err := d.reserve(ctx, cfg, available)
	if errors.Is(err, ErrExists) {
		if open, lookErr := d.Session(cfg.ID); lookErr == nil {
			held := open.Info().Config
			held.Python = d.python(held) // one that named none runs the daemon's
			if differs := held.Differs(asked); len(differs) > 0 {
				return nil, &SettingsError{ID: cfg.ID, Differences: differs}
			}
		}
	}
	if err != nil {
		return nil, err
	}
	err = d.open(ctx, s)
	if err != nil {
		err = d.heldElsewhere(s, err)
		d.mu.Lock()
		if d.sessions[cfg.ID] == s {
			if prev != nil {
				d.sessions[cfg.ID] = prev
			} else {
				delete(d.sessions, cfg.ID)
			}
		}
		d.mu.Unlock()
	}
	s.opened(err != nil) // once unlisted: a cell waiting for the opening finds no session
	if err != nil {
		return nil, err
	}
	return s, nil
}

// reserve lists a session of cfg while it opens, so that a second create of the id finds
// it, and returns it with the stopped session it replaces, if any.
func (d *Daemon) reserve(ctx context.Context, cfg Config, available int64) (s, prev *Session, err error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, nil, ErrClosed
		}
		prev = d.sessions[cfg.ID]
		if prev != nil {
			stopped, stopping := prev.stopState()
			if !stopped {
				d.mu.Unlock()
				return nil, nil, fmt.Errorf("%w: %s", ErrExists, cfg.ID)
			}
			if stopping != nil {
				d.mu.Unlock()
				select {
				case <-stopping:
					continue
				case <-ctx.Done():
					return nil, nil, fmt.Errorf("serve: session %s is stopping: %w", cfg.ID, ctx.Err())
				}
			}
		}
		open, opening := 0, 0
		for _, s := range d.sessions {
			if !s.stopped() {
				open++
			}
			s.mu.Lock()
			if s.opening != nil {
				opening++
			}
			s.mu.Unlock()
		}
		if open >= MaxOpenSessions {
			d.mu.Unlock()
			return nil, nil, ErrTooMany
		}
		if available >= 0 {
			if err := admission.Check(available, opening); err != nil {
				d.mu.Unlock()
				return nil, nil, fmt.Errorf("serve: %w; %s", err, d.whatToStop())
			}
		}
		s = d.newSession(state{Config: cfg, State: StateOpen, CreatedAt: time.Now().UTC()}, 0)
		s.opening = make(chan struct{})
		d.sessions[cfg.ID] = s
		d.mu.Unlock()
		return s, prev, nil
	}
}

// memAvailable is the host's available memory, as Options.MemAvailable says.
func (d *Daemon) memAvailable() (int64, error) {
	if d.opts.MemAvailable != nil {
		return d.opts.MemAvailable()
	}
	return admission.Available()
}

// whatToStop says which open sessions to stop to make room: those idle longest, up to
// three, with d.mu held.
func (d *Daemon) whatToStop() string {
	type idle struct {
		id   string
		last time.Time
	}
	var open []idle
	for id, s := range d.sessions {
		s.mu.Lock()
		if s.st.State == StateOpen && s.running == nil && s.opening == nil {
			open = append(open, idle{id, s.lastActive})
		}
		s.mu.Unlock()
	}
	if len(open) == 0 {
		return "no open session is idle: wait for one to end, or free memory on the host"
	}
	slices.SortFunc(open, func(a, b idle) int { return a.last.Compare(b.last) })
	var names []string
	for _, s := range open[:min(3, len(open))] {
		names = append(names, s.id)
	}
	return fmt.Sprintf("stop an idle session to make room (kiln sessions stop ID; idle longest: %s)", strings.Join(names, ", "))
}

// open records s and starts its runtime; the caller ends s.opening.
func (d *Daemon) open(ctx context.Context, s *Session) error {
	sess, _, err := d.store.EnsureSession(ctx, s.id)
	if err != nil {
		return err
	}
	rt, err := d.opts.Open(ctx, s.st.Config, d.store)
	if err != nil {
		return err
	}
	dir := rt.Dir()
	s.mu.Lock()
	s.storeID, s.rt, s.st.Dir = sess.ID, rt, dir
	st := s.st
	s.mu.Unlock()
	if err := d.states.save(st); err != nil {
		s.mu.Lock()
		s.rt = nil
		s.mu.Unlock()
		rt.Close()
		return err
	}
	s.touch()
	return nil
}

// lists says whether the daemon lists s under its id.
func (d *Daemon) lists(s *Session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sessions[s.id] == s
}

// Session returns the session named id. On a shared record, a session the daemon does
// not hold is the record's: another daemon's (whose writes are refused with
// ErrHeldElsewhere), a stopped one, or one no daemon holds, which the daemon lists as
// its own, to take at its next write.
func (d *Daemon) Session(id string) (*Session, error) {
	d.mu.Lock()
	s := d.sessions[id]
	d.mu.Unlock()
	switch {
	case d.shared() && (s == nil || !s.holds()):
		return d.recorded(id, s)
	case s == nil:
		return nil, fmt.Errorf("%w: %q", ErrNoSession, id)
	}
	return s, nil
}

// Sessions describes every session the daemon holds, open and stopped, by id.
func (d *Daemon) Sessions() []Info {
	d.mu.Lock()
	list := make([]*Session, 0, len(d.sessions))
	for _, s := range d.sessions {
		list = append(list, s)
	}
	d.mu.Unlock()
	out := make([]Info, 0, len(list))
	for _, s := range list {
		out = append(out, s.Info())
	}
	if d.shared() {
		local := map[string]Info{}
		for _, in := range out {
			local[in.ID] = in
		}
		all, err := d.sharedSessions(local)
		if err != nil {
			d.log.Warn("listing the sessions of the shared record: listing this daemon's", "err", err)
		} else {
			out = all
		}
	}
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Prune forgets the sessions stopped more than olderThan ago (every stopped one when
// olderThan is 0), returning their ids, and removes their directories under the data
// directory (datadir.SessionDir), the files their cells made there with them; their
// durable records stay. A session still stopping is kept: its stop has yet to write
// its file.
func (d *Daemon) Prune(olderThan time.Duration) ([]string, error) {
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: a negative age, %s", ErrInvalid, olderThan)
	}
	cutoff := time.Now().Add(-olderThan)
	d.mu.Lock()
	var gone []string
	for id, s := range d.sessions {
		if s.halted() && (olderThan == 0 || s.stoppedBefore(cutoff)) {
			gone = append(gone, id)
			delete(d.sessions, id)
		}
	}
	d.mu.Unlock()
	slices.Sort(gone)
	var errs []error
	for _, id := range gone {
		errs = append(errs, d.states.remove(id))
		if !d.opts.Guest {
			errs = append(errs, datadir.RemoveSessionDir(d.opts.Dir, id))
		}
	}
	return gone, errors.Join(errs...)
}

// Shutdown stops the daemon's sessions: no session is created or started again,
// running cells are interrupted (and hard-stopped past their grace) and recorded, and
// runtimes are shut down. The record stays open, for reads, until Close. Sessions stay
// open in the daemon's list, for the next daemon to hold again in new generations. A
// call while another runs waits for it.
func (d *Daemon) Shutdown() error {
	var err error
	d.shutOnce.Do(func() { err = d.shutdown() })
	return err
}

func (d *Daemon) shutdown() error {
	d.mu.Lock()
	d.closed = true
	d.closing.Store(true)
	list := make([]*Session, 0, len(d.sessions))
	for _, s := range d.sessions {
		list = append(list, s)
	}
	d.mu.Unlock()
	d.stopRun()
	if d.retained != nil {
		<-d.retained
	}
	if d.watched != nil {
		<-d.watched
	}
	var errs []error
	for _, s := range list {
		errs = append(errs, s.shutdown())
	}
	if d.zygotes != nil {
		errs = append(errs, d.zygotes.Close())
	}
	return errors.Join(errs...)
}

// Close stops the daemon: it shuts the sessions down, as Shutdown does, then releases
// the lease and closes the record.
func (d *Daemon) Close() error {
	err := d.Shutdown()
	d.closeOnce.Do(func() {
		if d.lease != nil {
			err = errors.Join(err, d.lease.Release(context.Background()))
		}
		err = errors.Join(err, d.store.Close())
	})
	return err
}
