// Package worker runs kiln's long-lived Python workers over the runtime control
// protocol v1: it starts a generation (a private socket directory, a startup token, a
// python3 -I child in its own process group, the hello handshake), drives one foreground
// operation at a time, interrupts, answers the host requests cell code makes, and
// invalidates the generation on any breach of the protocol or death of the process.
package worker

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/scratch"
	"github.com/kilnrt/kiln/internal/wire"
	"github.com/kilnrt/kiln/python"
)

// Defaults for Config's durations.
const (
	DefaultStartTimeout   = 10 * time.Second
	DefaultInterruptGrace = 2 * time.Second
	DefaultShutdownGrace  = 2 * time.Second
	// writeTimeout bounds one frame write other than a host reply; a worker that stops
	// reading its socket for this long when it should read has broken the exchange.
	writeTimeout = 5 * time.Second
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrStart is a generation that did not complete its handshake.
	ErrStart = errors.New("worker: start failed")
	// ErrDead is an operation on a generation that has ended.
	ErrDead = errors.New("worker: generation ended")
	// ErrNotRunning is an interrupt for an operation that is not running.
	ErrNotRunning = errors.New("worker: no such running operation")
	// ErrInterruptTimeout is a cell that did not stop within the interrupt grace.
	ErrInterruptTimeout = errors.New("worker: interrupt not honoured within the grace")
	// ErrCPUOverrun is a cell that ran past its CPU time and the overrun allowed.
	ErrCPUOverrun = errors.New("worker: cell ran past its CPU time")
	// ErrClosed is a generation ended by Shutdown.
	ErrClosed = errors.New("worker: shut down")
	// ErrRequestFlood is a worker that sent more host requests than MaxRequestFrames
	// for one operation, or MaxStrayRequestFrames for none.
	ErrRequestFlood = errors.New("worker: too many host requests")
)

// Bounds on the host requests a worker sends. Past one, the worker goes on sending
// after its refusals, each of which would be recorded: the generation ends instead.
const (
	// MaxRequestFrames bounds those of one operation: twice the 128 a cell may make.
	MaxRequestFrames = 256
	// MaxStrayRequestFrames bounds those of no running operation (tasks a cell left
	// behind) in one generation.
	MaxStrayRequestFrames = 4 * MaxRequestFrames
)

// Config describes how to start a generation.
type Config struct {
	Python         string        // interpreter, best resolved by interp.Find; default "python3"
	SessionID      string        // the session's identifier
	Generation     string        // this generation's identifier
	Dir            string        // the worker's working directory; empty means the host's
	Env            []string      // the worker's environment; nil means the host's
	StartTimeout   time.Duration // from spawn to hello; default DefaultStartTimeout
	InterruptGrace time.Duration // from interrupt to hard stop; default DefaultInterruptGrace
	Handler        Handler       // answers host requests; nil answers unknown_method to all
	// Package installs the kiln Python package for each generation; nil installs the
	// embedded sources (python.Precompiled spares each start their compilation).
	Package *python.Installer
	// Skills, when not nil, is the validated skill set the generation loads (see
	// skills.Set.Payload): a spawned worker's is written beside the control socket and
	// passed as --skills, a forked one's comes through a pipe (--skills-fd); the worker
	// reads it before it connects, and its hello must echo SkillsRevision.
	Skills         []byte
	SkillsRevision string
	// Tools, when not nil, is the tool catalog the generation loads (see
	// tools.Registry.Payload): passed as Skills is, as --tools or --tools-fd.
	Tools []byte
	// MemoryBytes, when positive, limits the worker's address space (RLIMIT_AS): a
	// cell that needs more gets MemoryError. CPUSeconds, when positive, is the CPU
	// time each cell may use: past it, CPULimitExceeded is raised in the cell.
	MemoryBytes int64
	CPUSeconds  int
	// Role is the generation's role: wire.RoleWorkbench (the default), which runs cells,
	// or wire.RoleHooks, which answers Invoke for the policy slots.
	Role string
	// ReleaseID is the identity of the policy a hooks generation loads, which its hello
	// must echo, and Release the release's directory (empty: the built-in defaults).
	ReleaseID string
	Release   string
	// Slots are the slots a hooks generation's hello must list, sorted: nil means
	// wire.Slots, a release that names no optional slot.
	Slots  []string
	Logger *slog.Logger // nil discards
	// Sandbox confines the generation's process under SandboxHost's mechanisms: its
	// working directory is Dir, its socket directory private to it. A zero Sandbox
	// confines nothing.
	Sandbox     sandbox.Policy
	SandboxHost *sandbox.Host
	// Forker, when set, forks the generation from a process that has the worker
	// loaded, rather than spawning python; one it cannot fork is spawned.
	Forker Forker
}

func (c Config) withDefaults() Config {
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.InterruptGrace <= 0 {
		c.InterruptGrace = DefaultInterruptGrace
	}
	if c.Handler == nil {
		c.Handler = UnknownMethods{}
	}
	if c.Role == "" {
		c.Role = wire.RoleWorkbench
	}
	if c.Package == nil {
		c.Package = python.Sources()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	return c
}

// Worker is one generation of a workbench: one process, one socket, one namespace.
type Worker struct {
	cfg    Config
	expect wire.Expect
	dir    string
	proc   *proc.Process
	rawOut *rawSink // the process's stdout and stderr, drained
	rawErr *rawSink
	conn   *net.UnixConn
	out    *outbox // frames for the writer goroutine, the one that writes conn
	// confined is what confined the process.
	confined sandbox.Applied
	// revision is the skills revision of the hello; set before Start returns.
	revision *string
	log      *slog.Logger

	invoking chan struct{} // held by the one invocation running; see Invoke

	mu    sync.Mutex
	state State
	op    *operation
	// lastOp is the id of the operation that completed last: a second completion of it
	// is one that cell code forged before the worker's own, which is dropped.
	lastOp string
	strays int // host requests of no running operation, this generation
	cause  error
	dead   chan struct{} // closed when the generation ends
	gone   chan struct{} // closed once its process is reaped and its directory removed

	// ended is the scope of requests from no running cell: already cancelled.
	ended context.Context
}

// operation is the foreground operation a generation is running.
type operation struct {
	id            string
	result        chan wire.Result // buffered; receives the worker's completion
	interrupted   chan struct{}    // closed at the first interrupt
	interruptSent bool             // guarded by Worker.mu
	ctx           context.Context  // the scope of its host requests; ends with it
	cancel        context.CancelFunc
	requests      int     // its host requests so far; guarded by Worker.mu
	stream        *stream // the cell's streamed output; nil for an invocation
	oomKills      int64   // the cgroup's OOM kills as it started
}

// Start spawns a generation and completes its handshake. On failure nothing is left
// running and the error, wrapping ErrStart, carries the child's stderr tail.
func Start(ctx context.Context, cfg Config) (_ *Worker, err error) {
	cfg = cfg.withDefaults()
	if !wire.ValidIdentifier(cfg.SessionID) || !wire.ValidIdentifier(cfg.Generation) {
		return nil, fmt.Errorf("%w: invalid identity %q/%q", ErrStart, cfg.SessionID, cfg.Generation)
	}
	w := &Worker{
		cfg:      cfg,
		expect:   wire.Expect{SessionID: cfg.SessionID, Generation: cfg.Generation},
		log:      cfg.Logger.With("session", cfg.SessionID, "generation", cfg.Generation),
		dead:     make(chan struct{}),
		gone:     make(chan struct{}),
		out:      newOutbox(),
		invoking: make(chan struct{}, 1),
		rawOut:   newRawSink(),
		rawErr:   newRawSink(),
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	w.ended = ended
	defer func() {
		if err != nil {
			w.teardown()
			err = fmt.Errorf("%w: %s: %w", ErrStart, cfg.Generation, err)
		}
	}()
	args := []string{"--session", cfg.SessionID, "--generation", cfg.Generation}
	module := "kiln.worker"
	if cfg.Role == wire.RoleHooks {
		module = "kiln.hooks"
		args = append(args, "--revision", cfg.ReleaseID)
		if cfg.Release != "" {
			args = append(args, "--release", cfg.Release)
		}
	}
	if cfg.MemoryBytes > 0 {
		args = append(args, "--memory", strconv.FormatInt(cfg.MemoryBytes, 10))
	}
	if cfg.CPUSeconds > 0 {
		args = append(args, "--cpu-seconds", strconv.Itoa(cfg.CPUSeconds))
	}
	var front *proc.Front
	if cfg.Role == wire.RoleWorkbench {
		// An init in front of the worker reaps the orphans of the cells' processes, which
		// the worker cannot tell from the children its own waits are for.
		if front, err = proc.NewFront(); err != nil {
			return nil, err
		}
		defer front.Close()
	}
	var secret [32]byte
	rand.Read(secret[:])
	token := hex.EncodeToString(secret[:])
	var deadline time.Time
	w.conn, deadline, err = w.launch(ctx, module, args, proc.Command{
		Path:   cfg.Python,
		Env:    cfg.Env,
		Dir:    cfg.Dir,
		Stdin:  []byte(token + "\n"),
		Stdout: w.rawOut,
		Stderr: w.rawErr,
		Front:  front,
		// Every process a cell starts ends with the generation, and with the host.
		Contain: true,
	})
	if err != nil {
		return nil, err
	}
	if err = w.handshake(ctx, token, deadline); err != nil {
		return nil, err
	}
	if err = w.setState(Idle); err != nil {
		return nil, err
	}
	go w.read()
	go w.write()
	go w.watch()
	w.log.Debug("worker ready", "pid", w.proc.Pid())
	return w, nil
}

// accept waits for the child to connect, for it to die, for the start timeout, or for
// ctx, whichever comes first.
func (w *Worker) accept(ctx context.Context, ln *net.UnixListener, deadline time.Time) (*net.UnixConn, error) {
	ln.SetDeadline(deadline)
	type accepted struct {
		conn *net.UnixConn
		err  error
	}
	done := make(chan accepted, 1)
	go func() {
		c, err := ln.AcceptUnix()
		done <- accepted{c, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			if errors.Is(a.err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("no connection within %s%s", w.cfg.StartTimeout, w.stderrNote())
			}
			return nil, fmt.Errorf("accept: %w", a.err)
		}
		return a.conn, nil
	case <-w.proc.Exited():
		return nil, fmt.Errorf("python exited before hello (%s)%s", w.proc.Describe(), w.stderrNote())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// handshake reads and checks hello.
func (w *Worker) handshake(ctx context.Context, token string, deadline time.Time) error {
	stop := context.AfterFunc(ctx, func() { w.conn.SetReadDeadline(time.Now()) })
	defer stop()
	w.conn.SetReadDeadline(deadline)
	payload, err := wire.ReadFrame(w.conn)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("reading hello: %w%s", err, w.exitNote())
	}
	w.conn.SetReadDeadline(time.Time{})
	env, err := wire.Decode(payload, w.expect)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	hello, ok := env.Message.(wire.Hello)
	switch {
	case !ok:
		return fmt.Errorf("first message is %q, not hello", env.Message.Kind())
	case subtle.ConstantTimeCompare([]byte(hello.Token), []byte(token)) != 1:
		return errors.New("hello carries the wrong token")
	case hello.Role != w.cfg.Role:
		return fmt.Errorf("hello claims role %q; want %s", hello.Role, w.cfg.Role)
	case w.cfg.Role == wire.RoleHooks:
		slots := w.cfg.Slots
		if slots == nil {
			slots = wire.Slots
		}
		if hello.Revision == nil || *hello.Revision != w.cfg.ReleaseID || !slices.Equal(hello.Slots, slots) {
			return fmt.Errorf("hello of a hooks worker echoes revision %s and slots %q; want %s and %q",
				describeRevision(hello.Revision), hello.Slots, w.cfg.ReleaseID, slots)
		}
	case len(hello.Slots) != 0:
		return fmt.Errorf("hello claims slots %q; want a workbench", hello.Slots)
	case w.cfg.Skills == nil && hello.Revision != nil:
		return fmt.Errorf("hello echoes skills revision %q, but no skills were given", *hello.Revision)
	case w.cfg.Skills != nil && (hello.Revision == nil || *hello.Revision != w.cfg.SkillsRevision):
		return fmt.Errorf("hello echoes skills revision %s, not the revision given, %s", describeRevision(hello.Revision), w.cfg.SkillsRevision)
	}
	w.revision = hello.Revision
	return nil
}

func describeRevision(r *string) string {
	if r == nil {
		return "null"
	}
	return *r
}

// Revision is the skills revision the generation's hello echoed: the set it loaded, or
// nil when it was given none.
func (w *Worker) Revision() *string { return w.revision }

// Generation is the generation's identifier.
func (w *Worker) Generation() string { return w.cfg.Generation }

// Pid is the worker's process id.
func (w *Worker) Pid() int { return w.proc.Pid() }

// Sandbox is what confines the worker's process.
func (w *Worker) Sandbox() sandbox.Applied { return w.confined }

// policyOf is cfg's sandbox policy for a generation whose directory is dir, private to
// it; "" for a generation that has none.
func policyOf(cfg Config, dir string) sandbox.Policy {
	pol := cfg.Sandbox
	pol.Python = cfg.Python
	if dir != "" {
		pol.Private = append(slices.Clip(pol.Private), dir)
	}
	if pol.Work == "" {
		pol.Work = cfg.Dir
	}
	if pol.MemoryBytes == 0 {
		pol.MemoryBytes = cfg.MemoryBytes
	}
	return pol
}

// State reports where the generation stands.
func (w *Worker) State() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Done is closed when the generation has ended; Err then says why.
func (w *Worker) Done() <-chan struct{} { return w.dead }

// Err is why the generation ended, or nil while it lives.
func (w *Worker) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause
}

// stderrNote is the child's stderr tail, for an error message.
func (w *Worker) stderrNote() string {
	if w.proc == nil {
		return ""
	}
	w.proc.Release(100 * time.Millisecond)
	tail := strings.TrimSpace(w.rawErr.generation.String())
	if tail == "" {
		return ""
	}
	return "; stderr: " + tail
}

// exitNote describes the process's end, if it ends soon, with its stderr tail.
func (w *Worker) exitNote() string {
	select {
	case <-w.proc.Exited():
		return " (python " + w.proc.Describe() + ")" + w.stderrNote()
	case <-time.After(200 * time.Millisecond):
		return ""
	}
}

// read serves the worker's frames until the generation ends.
func (w *Worker) read() {
	r := bufio.NewReaderSize(w.conn, 64<<10)
	for {
		payload, err := wire.ReadFrame(r)
		if err != nil {
			w.invalidate(fmt.Errorf("reading from worker: %w%s", err, w.exitNote()))
			return
		}
		env, err := wire.Decode(payload, w.expect)
		if err != nil {
			w.invalidate(err)
			return
		}
		if err := w.cfg.roleSends(env.Message); err != nil {
			w.invalidate(err)
			return
		}
		switch m := env.Message.(type) {
		case wire.Completed:
			err = w.complete(m)
		case wire.OutputChunk:
			err = w.output(m)
		case wire.Display:
			err = w.display(m)
		case wire.HostRequest:
			w.hostRequest(m)
		default:
			err = fmt.Errorf("worker sent %q, which only the host sends", m.Kind())
		}
		if err != nil {
			w.invalidate(err)
			return
		}
	}
}

// roleSends refuses a message the generation's role never sends: a hooks worker gets no
// runtime object and runs no cell, so a host request, output or display from one is a
// breach, refused before anything is done or queued for it.
func (c Config) roleSends(m wire.Message) error {
	if c.Role != wire.RoleHooks {
		return nil
	}
	switch m.(type) {
	case wire.HostRequest, wire.OutputChunk, wire.Display:
		return fmt.Errorf("worker: protocol violation: a hooks worker sent %q, which only a workbench sends", m.Kind())
	}
	return nil
}

// watch invalidates the generation when its process exits.
func (w *Worker) watch() {
	select {
	case <-w.proc.Exited():
		w.invalidate(fmt.Errorf("python %s%s", w.proc.Describe(), w.stderrNote()))
	case <-w.dead:
	}
}

// complete hands a completion to the operation it names.
func (w *Worker) complete(m wire.Completed) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.ID != "" && m.ID == w.lastOp && (w.op == nil || w.op.id != m.ID) {
		// The worker's own completion of an operation whose forged one came first: the
		// record was made; the operation after it is not failed for it.
		w.lastOp = ""
		w.log.Warn("a second completion of an operation dropped: the first was forged by cell code", "id", m.ID)
		return nil
	}
	if w.op == nil || w.op.id != m.ID {
		return fmt.Errorf("worker: protocol violation: a completion for %q, which is not running", m.ID)
	}
	if (m.Result.Kind == wire.ResultHook) != (w.cfg.Role == wire.RoleHooks) && m.Result.Kind != wire.ResultFailed {
		return fmt.Errorf("a %s result from a %s worker for %q", m.Result.Kind, w.cfg.Role, m.ID)
	}
	if w.op.stream != nil && m.Result.Kind == wire.ResultCell {
		output, err := w.op.stream.fill(m.Result.Output)
		if err != nil {
			return fmt.Errorf("completion for %q: %w", m.ID, err)
		}
		m.Result.Output = output
	} else if w.op.stream != nil && m.Result.Kind == wire.ResultFailed {
		m.Result.Output = slices.Clone(w.op.stream.records) // what the caller saw
	}
	select {
	case w.op.result <- m.Result:
		// The operation is over: a request read from now on is not live, whatever
		// its cell, and the scope of the requests it made has ended.
		w.op.cancel()
		w.lastOp = w.op.id
		w.op = nil
		return nil
	default:
		return fmt.Errorf("second completion for %q", m.ID)
	}
}

// invalidate ends the generation for cause: the process group is killed, the socket
// closed, and every waiter released. Only the first cause is kept.
func (w *Worker) invalidate(cause error) {
	w.mu.Lock()
	if w.state == Dead {
		w.mu.Unlock()
		return
	}
	if w.state == Stopping && !errors.Is(cause, ErrClosed) {
		// The worker ending while it shuts down is the shutdown it was asked for.
		cause = fmt.Errorf("%w (%v)", ErrClosed, cause)
	}
	w.setState(Dead)
	w.cause = cause
	if w.op != nil {
		w.op.cancel()
	}
	close(w.dead)
	w.mu.Unlock()
	if !errors.Is(cause, ErrClosed) {
		w.log.Warn("generation invalidated", "cause", cause)
	}
	w.teardown()
	close(w.gone)
}

// teardown kills the process group and removes the generation's directory.
func (w *Worker) teardown() {
	if w.conn != nil {
		w.conn.Close()
	}
	if w.proc != nil {
		w.proc.Kill()
		<-w.proc.Exited()
		w.proc.Release(time.Second)
	}
	if w.dir != "" {
		if err := scratch.RemoveAll(w.dir); err != nil {
			w.log.Warn("removing the generation's directory", "dir", w.dir, "err", err)
		}
	}
}

// setState moves the lifecycle; w.mu must be held.
func (w *Worker) setState(to State) error {
	if err := checkState(w.state, w.cause, to); err != nil {
		return err
	}
	w.state = to
	return nil
}

// Shutdown asks the worker to exit, and kills its group if it has not within grace. It
// returns once the process is reaped and the generation's directory removed.
func (w *Worker) Shutdown(grace time.Duration) error {
	w.mu.Lock()
	err := w.setState(Stopping)
	w.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrDead) {
			<-w.gone
			return nil
		}
		return err
	}
	// The frame may wait behind a large one a busy worker is not reading: the grace
	// bounds that wait too.
	timeout := time.NewTimer(grace)
	defer timeout.Stop()
	written := make(chan error, 1)
	if err := w.send(wire.Shutdown{}, written); err != nil {
		written <- err
	}
	select {
	case err := <-written:
		if err == nil {
			w.proc.Signal(syscall.SIGINT) // a worker busy in a cell reads the frame at once
			select {
			case <-w.proc.Exited():
			case <-timeout.C:
			}
		}
	case <-timeout.C:
	}
	w.invalidate(ErrClosed)
	<-w.gone
	return nil
}
