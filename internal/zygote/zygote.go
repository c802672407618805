// Package zygote starts workbench workers by forking a zygote: a Python process per
// interpreter that has imported kiln's worker once (python/kiln/zygote.py). A forked
// worker skips the interpreter's start and the imports; it is this process's child
// (CLONE_PARENT), init of PID and user namespaces of its own, and confines itself from
// the same spec a spawned worker's helper applies (internal/sandbox's Fork). A zygote
// that dies is started again in the background; meanwhile, and wherever forking cannot
// give what spawning gives, the caller spawns.
package zygote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/procfs"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/scratch"
	kilnpy "github.com/kilnrt/kiln/python"
)

// Bounds of a zygote's exchange.
const (
	// StartTimeout bounds a zygote's start, to its first answer.
	StartTimeout = 10 * time.Second
	// replyTimeout bounds the zygote's answer to one fork: past it the zygote is
	// stopped as hung.
	replyTimeout = 5 * time.Second
	// maxReply bounds the zygote's answer.
	maxReply = 4 << 10
	// maxRestarts zygotes of one interpreter are started again after one dies within
	// restartWindow; past that the pool spawns for that interpreter.
	maxRestarts   = 3
	restartWindow = time.Minute
)

// Env is the environment variable that turns forking off for a daemon's sessions,
// when it is Off: each worker is then spawned, as with no zygote.
const (
	Env = "KILN_ZYGOTE"
	Off = "off"
)

// ErrNoZygote is a fork the pool cannot make now: the caller spawns.
var ErrNoZygote = errors.New("zygote: no zygote")

// Request is one worker to fork.
type Request struct {
	Python  string            // the interpreter, resolved
	Package *kilnpy.Installer // the package the zygote imports, which the worker has imported already
	Module  string            // "kiln.worker"
	Args    []string          // the module's arguments
	Command proc.Command      // the worker's environment, working directory, stdin and sinks
	Sandbox sandbox.Policy    // how the worker is confined
	Host    *sandbox.Host     // the kernel's mechanisms; nil for a profile that confines nothing
}

// Stats counts what a pool did.
type Stats struct {
	Forked   int // workers forked
	Spawned  int // forks refused, for the caller to spawn
	Started  int // zygotes started, restarts included
	Restarts int // zygotes started again after one died
}

// Pool keeps one zygote per interpreter. Its methods are safe for concurrent use.
type Pool struct {
	log *slog.Logger

	// hold, when set (a test's), holds each answer of a zygote: see forking.
	hold func(ctx context.Context, pid int)

	mu     sync.Mutex
	zs     map[string]*zygote // by interpreter path
	stats  Stats
	closed bool
	wg     sync.WaitGroup // the zygotes' watchers
}

// NewPool returns an empty pool; log nil discards.
func NewPool(log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool{log: log, zs: map[string]*zygote{}}
}

// Stats returns what the pool did so far.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Fork forks r's worker from its interpreter's zygote, started at the first request.
// An error wrapping ErrNoZygote or sandbox.ErrNoFork says the caller should spawn.
func (p *Pool) Fork(ctx context.Context, r Request) (*proc.Process, sandbox.Applied, error) {
	if !procfs.NamesSelf() {
		return p.refuse(errors.New("/proc names another PID namespace than this process's"))
	}
	z, err := p.zygote(r.Python, r.Package)
	if err != nil {
		return p.refuse(err)
	}
	select {
	case <-z.ready:
	case <-ctx.Done():
		return nil, sandbox.Applied{}, ctx.Err()
	}
	if z.startErr != nil {
		return p.refuse(z.startErr)
	}
	child, applied, err := r.Host.Fork(ctx, r.Sandbox, r.Command, forking{z: z, r: r, hold: p.hold})
	p.mu.Lock()
	if err == nil {
		p.stats.Forked++
	} else {
		p.stats.Spawned++
	}
	p.mu.Unlock()
	return child, applied, err
}

// refuse counts a fork refused for cause.
func (p *Pool) refuse(cause error) (*proc.Process, sandbox.Applied, error) {
	p.mu.Lock()
	p.stats.Spawned++
	p.mu.Unlock()
	return nil, sandbox.Applied{}, fmt.Errorf("%w: %w", ErrNoZygote, cause)
}

// zygote returns the zygote of python, starting one if there is none or its package
// changed; one that died is being started again, or gave up (an error).
func (p *Pool) zygote(python string, pkg *kilnpy.Installer) (*zygote, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("the pool is closed")
	}
	z := p.zs[python]
	switch {
	case z != nil && z.pkg == pkg && !z.dead():
		return z, nil
	case z != nil && z.pkg == pkg && z.gaveUp:
		return nil, fmt.Errorf("the zygote of %s died %d times within %s", python, maxRestarts+1, restartWindow)
	case z != nil && z.pkg == pkg:
		return nil, errors.New("the zygote died; another is starting")
	case z != nil:
		z.stop() // its package is not the sessions' any more
	}
	p.zs[python] = p.launch(python, pkg, nil)
	return p.zs[python], nil
}

// launch starts a zygote of python in the background, and watches it; p.mu is held.
// deaths are the times the zygotes before it died.
func (p *Pool) launch(python string, pkg *kilnpy.Installer, deaths []time.Time) *zygote {
	z := &zygote{python: python, pkg: pkg, ready: make(chan struct{}), exited: make(chan struct{}),
		requests: make(chan *exchange), quit: make(chan struct{}), deaths: deaths, log: p.log.With("zygote", python)}
	p.stats.Started++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		z.run()
		p.died(z)
	}()
	return z
}

// died restarts the zygote of z's interpreter after z ended, unless the pool closed or
// it died too often.
func (p *Pool) died(z *zygote) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.zs[z.python] != z {
		return
	}
	now := time.Now()
	deaths := []time.Time{now}
	for _, t := range z.deaths {
		if now.Sub(t) < restartWindow {
			deaths = append(deaths, t)
		}
	}
	if len(deaths) > maxRestarts {
		z.gaveUp = true
		p.log.Error("zygote died too often; workers are spawned", "python", z.python, "deaths", len(deaths), "err", z.cause)
		return
	}
	p.log.Warn("zygote died; starting another", "python", z.python, "err", z.cause)
	p.stats.Restarts++
	p.zs[z.python] = p.launch(z.python, z.pkg, deaths)
}

// Close stops every zygote and waits for them; workers forked before go on.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	zs := p.zs
	p.zs = map[string]*zygote{}
	p.mu.Unlock()
	for _, z := range zs {
		z.stop()
	}
	p.wg.Wait()
	return nil
}

// zygote is one zygote process and the goroutine that owns its socket.
type zygote struct {
	python string
	pkg    *kilnpy.Installer
	log    *slog.Logger
	deaths []time.Time // of the zygotes before it, within restartWindow
	gaveUp bool        // guarded by Pool.mu

	ready    chan struct{} // closed once started, or failed to (startErr)
	startErr error         // why it did not start; set before ready closes
	exited   chan struct{} // closed once it has ended and its directory is removed
	cause    error         // why it ended; set before exited closes
	requests chan *exchange
	stopOnce sync.Once
	quit     chan struct{}
}

// exchange is one request and its answer.
type exchange struct {
	payload []byte
	files   []*os.File
	answer  chan answer // buffered
}

// answer is the zygote's answer to one exchange: the child's pid, or why there is none.
type answer struct {
	pid int
	err error
}

// dead reports whether z has ended or failed to start.
func (z *zygote) dead() bool {
	select {
	case <-z.exited:
		return true
	default:
		return false
	}
}

// stop ends z.
func (z *zygote) stop() {
	z.stopOnce.Do(func() { close(z.quit) })
}

// run starts the zygote, serves its requests until it ends or is stopped, and cleans up.
func (z *zygote) run() {
	defer close(z.exited)
	dir, err := scratch.Make(scratch.Worker)
	if err != nil {
		z.fail(err)
		return
	}
	defer scratch.RemoveAll(dir)
	if err := z.pkg.Install(dir); err != nil {
		z.fail(err)
		return
	}
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		z.fail(fmt.Errorf("socketpair: %w", err))
		return
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "zygote"), os.NewFile(uintptr(pair[1]), "zygote child")
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		z.fail(fmt.Errorf("socket: %w", err))
		return
	}
	uc := conn.(*net.UnixConn)
	defer uc.Close()
	stderr := proc.NewTail(proc.TailSize)
	zp, err := proc.Start(proc.Command{Path: z.python, Args: kilnpy.Args(dir, "kiln.zygote"), Env: os.Environ(),
		ExtraFiles: []*os.File{theirs}, Stderr: stderr})
	theirs.Close()
	if err != nil {
		z.fail(err)
		return
	}
	defer func() {
		zp.Kill()
		<-zp.Exited()
		zp.Release(time.Second)
	}()
	close(z.ready)
	z.log.Debug("zygote started", "pid", zp.Pid())
	for {
		select {
		case <-z.quit:
			z.cause = errors.New("stopped")
			return
		case <-zp.Exited():
			z.cause = fmt.Errorf("zygote %s; stderr: %s", zp.Describe(), stderr.String())
			return
		case x := <-z.requests:
			pid, err := z.exchange(uc, x)
			x.answer <- answer{pid, err}
			var hung *hungError
			if errors.As(err, &hung) {
				select {
				case <-zp.Exited():
					err = fmt.Errorf("%w (zygote %s; stderr: %s)", err, zp.Describe(), stderr.String())
				case <-time.After(100 * time.Millisecond):
				}
				z.cause = err
				return
			}
		}
	}
}

// fail ends a zygote that did not start.
func (z *zygote) fail(err error) {
	z.startErr = fmt.Errorf("starting the zygote: %w", err)
	z.cause = z.startErr
	close(z.ready)
}

// hungError is a zygote that did not answer, or whose socket failed: it is stopped.
type hungError struct{ err error }

func (e *hungError) Error() string { return "zygote: " + e.err.Error() }
func (e *hungError) Unwrap() error { return e.err }

// exchange sends x's request and reads the answer.
func (z *zygote) exchange(uc *net.UnixConn, x *exchange) (int, error) {
	fds := make([]int, len(x.files))
	for i, f := range x.files {
		fds[i] = int(f.Fd())
	}
	deadline := time.Now().Add(replyTimeout)
	uc.SetDeadline(deadline)
	if _, _, err := uc.WriteMsgUnix(x.payload, syscall.UnixRights(fds...), nil); err != nil {
		return 0, &hungError{fmt.Errorf("sending a request: %w", err)}
	}
	buf := make([]byte, maxReply)
	n, err := uc.Read(buf)
	if err != nil {
		return 0, &hungError{fmt.Errorf("reading the answer: %w", err)}
	}
	var a struct {
		Pid   int    `json:"pid"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(buf[:n], &a); err != nil {
		return 0, &hungError{fmt.Errorf("the answer %q: %w", buf[:n], err)}
	}
	if a.Error != "" {
		return 0, errors.New("zygote: " + a.Error)
	}
	return a.Pid, nil
}

// forking is the sandbox.Forker of one request.
type forking struct {
	z *zygote
	r Request
	// hold, when set (a test's), is told the pid the zygote answered, and returns when
	// the answer may go on.
	hold func(ctx context.Context, pid int)
}

// message is what the zygote reads: the clone's flags, and where in the files the
// child's report descriptor is. The rest of the request (request) goes to the child
// alone, through a pipe the zygote hands down unread, so that no session's environment
// is ever in the zygote's memory, which every later worker inherits.
type message struct {
	Flags  uintptr `json:"flags"`
	Report int     `json:"report"`
}

// request is what the child reads (see python/kiln/zygote.py).
type request struct {
	Spec json.RawMessage `json:"spec"`
	Argv []string        `json:"argv"`
	Env  []string        `json:"env"`
	Cwd  string          `json:"cwd,omitempty"`
}

// Fork asks the zygote for the child, and writes the child its request.
func (f forking) Fork(ctx context.Context, flags uintptr, spec []byte, c proc.Command, files []*os.File) (int, error) {
	payload, err := json.Marshal(request{Spec: spec, Argv: append([]string{f.r.Module}, f.r.Args...),
		Env: c.Env, Cwd: c.Dir})
	if err != nil {
		return 0, fmt.Errorf("zygote: %w", err)
	}
	msg, err := json.Marshal(message{Flags: flags, Report: 3 + len(c.ExtraFiles)})
	if err != nil {
		return 0, fmt.Errorf("zygote: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("zygote: request pipe: %w", err)
	}
	defer r.Close()
	go func() {
		w.Write(payload) // the child reads it to its end; a child that died fails it
		w.Close()
	}()
	x := &exchange{payload: msg, files: append(slices.Clip(files), r), answer: make(chan answer, 1)}
	select {
	case f.z.requests <- x:
	case <-f.z.exited:
		return 0, fmt.Errorf("%w: %w", ErrNoZygote, f.z.cause)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	a := <-x.answer // bounded by replyTimeout
	if f.hold != nil {
		f.hold(ctx, a.pid)
	}
	return a.pid, a.err
}
