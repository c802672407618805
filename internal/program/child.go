package program

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/kilnrt/kiln/python"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/scratch"
	"github.com/kilnrt/kiln/internal/textcut"
)

// DefaultGrace is how long a child has between SIGTERM and SIGKILL when the host ends
// it (a timeout, an abort, a protocol breach). Python's default SIGTERM action ends
// the interpreter at once, so the grace only serves programs that trap SIGTERM, and
// the host waits out all of it for every such run it ends: one second, not the
// reference's three.
const DefaultGrace = time.Second

// MaxCallsInFlight is how many binding calls of a child may run at once. While that
// many run the host stops reading fd 3 (the child's writes then block) until one
// returns: a flood of calls costs the host bounded memory and never fails a run that
// gathers more calls than this, as a program may. Replies waiting to be written are
// bounded apart (MaxRepliesQueued, MaxReplyQueueBytes).
const MaxCallsInFlight = 1024

const (
	// exitIdleWait is how long, once python has exited, the host waits for more of
	// fd 3 while nothing arrives and it has read all there was, before it settles
	// without a done frame. A done written before the exit is already there to read,
	// and fd 3 ends when the last process holding it does; only a descendant that
	// left the group and holds fd 3 makes the host wait this long.
	exitIdleWait = 500 * time.Millisecond
	// exitMostWait bounds that wait while the reader keeps reading: a descendant that
	// keeps writing to fd 3 would otherwise hold the run until its wall clock. A frame
	// python wrote before it exited, a large done frame say, is still judged whatever
	// its time.
	exitMostWait = 2 * time.Second
	exitPoll     = 20 * time.Millisecond
	// cpuSlack is how far below its CPU limit a child's accounted CPU time may be
	// when the limit's signal ends it: the kernel fires the limit on its own clock,
	// and user and system time are a split of it, rounded.
	cpuSlack = 250 * time.Millisecond
	// stragglerWait bounds the wait, past the grace, for the child's process group to
	// be gone after the host killed it; stragglerPoll is how often it looks.
	stragglerWait = 2 * time.Second
	stragglerPoll = 50 * time.Millisecond
	// previewBytes caps the binding name an unknown-binding reply quotes.
	previewBytes = 1 << 10
	// truncatedSuffix ends an error message cut to the value budget.
	truncatedSuffix = "… [truncated]"
)

// childPath is the PATH of the child's reduced environment.
const childPath = "/usr/local/bin:/usr/bin:/bin"

// A child is one python process speaking the fd-3 protocol, from spawn to settlement.
type child struct {
	r      *Runner
	boot   *spec // the configuration it booted with
	dir    string
	proc   *proc.Process
	conn   *os.File // the host's end of fd 3
	out3   *outbox  // the one writer of conn
	log    *slog.Logger
	ledger *ledger
	out    [2]*pipe // fd 1, fd 2
	// confined is what confines the process.
	confined sandbox.Applied

	frames    chan Frame    // boot-ack and done frames, in order
	slots     chan struct{} // one per binding call running
	args      *byteBudget   // the frame bytes of the binding calls running
	readDone  chan struct{} // closed when the reader stops; then readErr is set
	readErr   error
	stop      chan struct{} // closed at settlement
	stopped   atomic.Bool
	dropped   atomic.Int64
	inRead    atomic.Bool  // the reader waits in a read of fd 3
	readBytes atomic.Int64 // read from fd 3 so far

	current atomic.Pointer[running] // the run, once run is sent
	next    int64                   // the call id expected next; the reader's

	cpuLimit time.Duration // CPU time past which a SIGKILL is the CPU limit's
	acked    bool          // owned by whoever drives the child: boot, then run
	// setup is how long its spawn waited for the Runner to make the packages' archive:
	// the Runner's own setup, once, which no run's wall clock is charged.
	setup time.Duration
}

// spawn starts a child for s and sends its boot frame. The child is not yet acked. If
// ctx ends while the child waits for the packages' archive, spawn gives up.
func (r *Runner) spawn(ctx context.Context, s *spec) (_ *child, err error) {
	c := &child{
		r:        r,
		boot:     s,
		ledger:   newLedger(s.limits.MaxLogBytes),
		frames:   make(chan Frame),
		slots:    make(chan struct{}, MaxCallsInFlight),
		args:     newByteBudget(s.frameCap),
		readDone: make(chan struct{}),
		stop:     make(chan struct{}),
		cpuLimit: effectiveCPULimit(s.limits.CPUSeconds),
	}
	c.out = [2]*pipe{c.ledger.pipe(), c.ledger.pipe()}
	if c.dir, err = scratch.Make(scratch.Program); err != nil { // 0700
		return nil, fmt.Errorf("program: run directory: %w", err)
	}
	defer func() {
		if err != nil {
			scratch.RemoveAll(c.dir)
		}
	}()
	// One file, which the child imports from: the fewer files a run writes and removes,
	// the sooner it starts and ends. It is written while the interpreter starts, which
	// waits for it at the gate (python.GatedArgs): the child's fd 4, whose other end
	// this host closes once the file is whole.
	pkg := filepath.Join(c.dir, python.ArchiveName)
	gate, opened, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("program: gate: %w", err)
	}
	defer gate.Close() // the child has its own copy
	defer opened.Close()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("program: socketpair: %w", err)
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("program: socketpair: %w", err)
	}
	c.conn = os.NewFile(uintptr(fds[0]), "fd3") // non-blocking: pollable, so Close ends a Read or Write
	c.out3 = newOutbox(c.conn, r.stall)
	childEnd := os.NewFile(uintptr(fds[1]), "fd3-child")
	defer childEnd.Close()
	front, err := proc.NewFront()
	if err != nil {
		c.conn.Close()
		return nil, fmt.Errorf("program: %w", err)
	}
	defer front.Close()
	pol := r.opts.Sandbox
	pol.Python, pol.Work = r.python, cmp.Or(pol.Work, r.opts.Dir)
	pol.Private = append(slices.Clip(pol.Private), c.dir)
	pol.MaxProcesses = s.limits.MaxProcesses + keeperTasks + 1 // itself, its init or keeper, and as many more
	c.proc, c.confined, err = r.opts.SandboxHost.Start(ctx, pol, proc.Command{
		Path: r.python,
		Args: python.GatedArgs(pkg, 4, "kiln.program", "--status-fd", strconv.Itoa(frontFD)),
		Env:  []string{"PATH=" + childPath, "LANG=C.UTF-8", "HOME=" + c.dir, "TMPDIR=" + c.dir},
		Dir:  r.opts.Dir,
		// The child puts fd 0 on /dev/null itself; until then it is a pipe at EOF.
		Stdout:     c.out[0],
		Stderr:     c.out[1],
		ExtraFiles: []*os.File{childEnd, gate, front.File()},
		// Init of a PID namespace of its own, with an init in front of python: every
		// process the program starts ends with the run.
		Contain: true,
		Front:   front,
	})
	if err != nil {
		c.conn.Close()
		return nil, fmt.Errorf("program: starting python: %w", err)
	}
	c.log = r.log.With("pid", c.proc.Pid())
	abandon := func() {
		c.proc.Kill()
		<-c.proc.Exited()
		c.proc.Release(0)
		c.conn.Close()
	}
	// While python waits at the gate, before it can run anything of a program. A
	// child that died before the gate opened is not limited: its run reports its end.
	// Without a cgroup to limit its processes, the child gets an RLIMIT_NPROC. In a
	// user namespace of its own the kernel counts the child's tasks alone; else all
	// its user's, counted now.
	if !r.opts.SandboxHost.LimitsProcesses(pol) {
		tasks := 1
		if !c.proc.Namespaced() {
			tasks += userTasks(os.Getuid())
		}
		if err := limitProcesses(c.proc, tasks, s.limits.MaxProcesses+keeperTasks); err != nil {
			abandon()
			return nil, err
		}
	}
	if c.setup, err = r.install(ctx, pkg); err != nil {
		abandon()
		return nil, err
	}
	opened.Close() // the child imports now
	go c.read()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		c.out3.run()
	}()
	c.out3.send(s.boot)
	return c, nil
}

// keeperTasks is the process the child forks before any program code runs, and which
// a program's own processes are not charged for: as init of its PID namespace
// (python/kiln/nsinit.py), python, which the kernel ends everything in the namespace
// with; without one, its keeper (python/kiln/program_keeper.py), which ends the child's
// process group when the child ends, the host's SIGKILL included.
const keeperTasks = 1

// frontFD is the child's descriptor of its init's status pipe: after fd 3 and the gate.
const frontFD = 5

// effectiveCPULimit is the CPU time the child can use before the kernel ends it:
// cpuSeconds, or less if the host's own limit, which the child inherits, is lower.
func effectiveCPULimit(cpuSeconds int) time.Duration {
	limit := uint64(cpuSeconds)
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_CPU, &rl) == nil {
		limit = min(limit, rl.Cur, rl.Max) // RLIM_INFINITY is the largest uint64
	}
	return time.Duration(limit) * time.Second
}

// read is the child's fd-3 reader: it caps, checks and rebuilds each line, bills log
// frames to the ledger, answers calls, and hands boot-ack and done over in order.
func (c *child) read() {
	defer close(c.readDone)
	lr := newLineReader(watchedReader{c}, c.boot.frameCap)
	for {
		line, err := lr.next()
		if err != nil {
			c.readErr = err
			return
		}
		if c.stopped.Load() {
			return // settled: what comes now is ignored
		}
		if len(bytes.TrimLeft(line, " \t\r")) == 0 {
			continue // an empty line is no frame
		}
		f, err := parseChildFrame(line, c.stop)
		if errors.Is(err, lossless.ErrStopped) {
			return // settled while parsing
		}
		if err != nil {
			c.drop(err, len(line))
			continue
		}
		switch f := f.(type) {
		case Log:
			c.ledger.frame(f)
			continue
		case Call:
			c.call(f, len(line))
			continue
		}
		select {
		case c.frames <- f:
		case <-c.stop:
			return
		}
	}
}

// call answers f, size bytes on fd 3, if it is the call the host expects next, else
// drops it. A call is expected only once run has been sent, and never after python
// exited. It waits, not reading fd 3, while MaxCallsInFlight bindings run or while
// the frames of those running hold the frame cap's worth of bytes, of which each call
// takes its own: so the arguments the host holds stay within a multiple of the cap.
func (c *child) call(f Call, size int) {
	cur := c.current.Load()
	select {
	case <-c.proc.Exited():
		cur = nil
	default:
	}
	if cur == nil || f.ID != float64(c.next) {
		c.drop(junk("a call out of turn"), 0)
		return
	}
	id := c.next
	c.next++
	select {
	case c.slots <- struct{}{}:
	case <-c.stop:
		return
	}
	if !c.args.acquire(size, c.stop) {
		<-c.slots
		return
	}
	c.r.wg.Add(1)
	go func() {
		defer c.r.wg.Done()
		defer func() { <-c.slots }()
		defer c.args.release(size)
		if turns := cur.spec.turns[f.Global]; turns != nil {
			select {
			case turns <- struct{}{}:
				defer func() { <-turns }() // once the reply is queued
			case <-cur.ctx.Done():
				return
			}
		}
		// A binding starts once it has reserved room for its reply, so that calls
		// started together cannot together pass the bound on the replies the host holds,
		// and the run of a child that does not read them ends.
		reserved := cur.estimate(f.Global)
		if c.out3.reserve(reserved, cur.ctx.Done()) != nil {
			return // the run ends: the replies stalled, or it settled
		}
		defer func() {
			if reserved >= 0 {
				c.out3.release(reserved)
			}
		}()
		// The binding runs on a goroutine of its own that nothing waits for: one that
		// ignores its ctx is abandoned when the run settles, its result discarded.
		answer := make(chan Reply, 1)
		go func() { answer <- invoke(cur.ctx, cur.spec, f, id) }()
		var r Reply
		select {
		case r = <-answer:
		case <-cur.ctx.Done():
			return
		}
		reply, ok := c.replyFrame(cur, r, &reserved)
		if !ok {
			return // settled, or stalled, while it waited
		}
		cur.learn(f.Global, len(reply))
		c.out3.reply(reply, reserved)
		reserved = -1
	}()
}

// Bounds on converting binding results into reply frames.
const (
	// MaxConvertBytes bounds the memory the conversions of a Runner's binding results
	// into reply frames take at once, as walkFactor times the reply bytes each may
	// make: a conversion waits for room, and one alone is always let in.
	MaxConvertBytes = 64 << 20
	// walkFactor is what converting a value may take per byte of its reply, at most: the
	// frame itself, and for each level of nesting (two bytes of JSON at the least) a
	// cursor of the walk (24 bytes).
	walkFactor = 13
	// initialReplyReserve is what a call reserves of the reply queue before any reply of
	// its namespace in the run has told how large they are: an eighth of the bound, so
	// that the first calls of a gather do not run one at a time.
	initialReplyReserve = MaxReplyQueueBytes / 8
	// minReplyReserve is the least a call reserves.
	minReplyReserve = 4 << 10
)

// replyFrame converts r into its reply frame, and the reservation of *reserved bytes
// its call holds into one that holds the frame. The conversion first measures the
// value against the reservation, then encodes it, while it holds room for that much
// in the Runner's conversion budget: a value past its reservation is measured again
// against four times as much, up to the whole reply queue, its call's reservation
// grown to that first. It
// returns false if the run settled or the replies stalled meanwhile, the reservation
// then gone.
func (c *child) replyFrame(cur *running, r Reply, reserved *int) ([]byte, bool) {
	stop := cur.ctx.Done()
	if !r.OK {
		reply := AppendReply(nil, r)
		return reply, c.growTo(reserved, len(reply), stop)
	}
	// The frame's bytes beside its value, for this id: a value that fills the rest of
	// the queue's bound exactly is a reply, one a byte longer is not.
	beside := len(AppendReply(nil, Reply{ID: r.ID, OK: true})) - len("null")
	for {
		limit := max(*reserved-beside, 0)
		charge := walkFactor * (limit + replyOverhead)
		if !c.r.convert.acquire(charge, stop) {
			return nil, false
		}
		size, err := lossless.Measure(r.Value, limit)
		var reply []byte
		switch {
		case errors.Is(err, lossless.ErrTooLarge) && *reserved < MaxReplyQueueBytes:
			c.r.convert.release(charge)
			if !c.growTo(reserved, min(4**reserved, MaxReplyQueueBytes), stop) {
				return nil, false
			}
			continue
		case errors.Is(err, lossless.ErrTooLarge):
			reply = AppendReply(nil, Reply{ID: r.ID, Message: fmt.Sprintf("the binding's result exceeds %d bytes as a reply", MaxReplyQueueBytes)})
		case errors.Is(err, lossless.ErrLossy):
			reply = AppendReply(nil, Reply{ID: r.ID, Message: "binding resolution must be lossless JSON"})
		default:
			reply = appendReplySized(r, size)
		}
		c.r.convert.release(charge)
		if len(reply) > MaxReplyQueueBytes { // integers of 1e21 and more, in all their digits
			reply = AppendReply(nil, Reply{ID: r.ID, Message: fmt.Sprintf("the binding's result exceeds %d bytes as a reply", MaxReplyQueueBytes)})
		}
		return reply, c.growTo(reserved, len(reply), stop)
	}
}

// growTo grows the reservation of *reserved bytes to n bytes, if it is less; false if
// the run settled or the replies stalled first, the reservation then gone.
func (c *child) growTo(reserved *int, n int, stop <-chan struct{}) bool {
	if n <= *reserved {
		return true
	}
	if c.out3.grow(*reserved, n, stop) != nil {
		*reserved = -1
		return false
	}
	*reserved = n
	return true
}

// watchedReader reads fd 3, telling the child when it waits in a read and how many
// bytes it has read.
type watchedReader struct{ c *child }

// Read reads fd 3 once.
func (w watchedReader) Read(p []byte) (int, error) {
	w.c.inRead.Store(true)
	n, err := w.c.conn.Read(p)
	w.c.inRead.Store(false)
	w.c.readBytes.Add(int64(n))
	return n, err
}

// drop counts a frame the host will not act on; the frame itself is never logged.
func (c *child) drop(why error, size int) {
	c.dropped.Add(1)
	c.log.Debug("dropped a child frame", "reason", why, "bytes", size)
}

// running is the run a child serves: what its calls bind to.
type running struct {
	ctx  context.Context // ends at settlement
	spec *spec
	// largest is, per namespace, the largest reply of its calls in the run so far; 0
	// before the first.
	largest map[string]*atomic.Int64
}

func newRunning(ctx context.Context, s *spec) *running {
	r := &running{ctx: ctx, spec: s, largest: make(map[string]*atomic.Int64, len(s.funcs))}
	for global := range s.funcs {
		r.largest[global] = new(atomic.Int64)
	}
	return r
}

// estimate is how many bytes a call of namespace global reserves for its reply: as
// many as the largest reply of the namespace so far, or initialReplyReserve before the
// first; at least minReplyReserve.
func (r *running) estimate(global string) int {
	l := r.largest[global]
	if l == nil || l.Load() == 0 {
		return initialReplyReserve
	}
	return max(int(l.Load()), minReplyReserve)
}

// learn notes a reply of n bytes of namespace global.
func (r *running) learn(global string, n int) {
	l := r.largest[global]
	if l == nil {
		return // an unknown binding's rejection
	}
	for {
		old := l.Load()
		if int64(n) <= old || l.CompareAndSwap(old, int64(n)) {
			return
		}
	}
}

// errBoot is a child that did not reach boot-ack.
var errBoot = errors.New("program: child did not boot")

// awaitAck drives a child from spawn to boot-ack, for the warm pool.
func (c *child) awaitAck(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case f := <-c.frames:
			switch f.(type) {
			case BootAck:
				c.acked = true
				return nil
			case Done:
				return fmt.Errorf("%w: it completed during boot", errBoot)
			}
		case <-c.readDone:
			return fmt.Errorf("%w: fd 3 closed", errBoot)
		case <-c.proc.Exited():
			return fmt.Errorf("%w: python exited: %s", errBoot, c.proc.Describe())
		case <-t.C:
			return fmt.Errorf("%w: no boot-ack within %v", errBoot, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// alive reports whether an idle child has not been seen to exit or close fd 3. A
// child the host has not yet seen die may be dying: see dying.
func (c *child) alive() bool {
	select {
	case <-c.proc.Exited():
		return false
	case <-c.readDone:
		return false
	default:
		return true
	}
}

// dying reports whether process pid, a child not yet reaped, has exited (a zombie) or
// has SIGKILL pending, from /proc/pid/status: true from the moment a SIGKILL was sent
// to it, before the host can see anything.
func dying(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true
	}
	const sigkill = 1 << (syscall.SIGKILL - 1)
	for line := range strings.Lines(string(status)) {
		key, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		value = strings.TrimSpace(value)
		switch key {
		case "State":
			if value != "" && (value[0] == 'Z' || value[0] == 'X') {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(value, 16, 64); err == nil && mask&sigkill != 0 {
				return true
			}
		}
	}
	return false
}

// ending says how settlement ends the child.
type ending int

const (
	killNow  ending = iota // it completed or exited: SIGKILL the group at once
	graceful               // SIGTERM, then SIGKILL after the grace
)

// run drives the child through one run of s: sends run (at once if the child is
// already acked, else on its boot-ack), answers calls, and settles on the first of
// done, python's exit, a protocol breach, the wall clock and ctx. start is when the
// wall clock started.
func (c *child) run(ctx context.Context, s *spec, start time.Time) Result {
	ctx, cancel := context.WithCancel(ctx) // the bindings' context: ends at settlement
	defer cancel()
	wall := time.NewTimer(s.limits.Wall - time.Since(start))
	defer wall.Stop()
	sendRun := func() {
		c.current.Store(newRunning(ctx, s))
		c.out3.send(AppendRun(nil, s.source))
	}
	if c.acked {
		sendRun()
	}
	var (
		exited   = c.proc.Exited()
		readDone = c.readDone
		gone     bool         // python exited
		poll     *time.Ticker // while gone: watches the reader
		pollC    <-chan time.Time
		idle     time.Time // since when the reader has waited for fd 3 with nothing new
		seen     int64     // bytes read as of idle
		settleBy time.Time // while gone: past it, the run settles once the reader waits
	)
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		select {
		case f := <-c.frames:
			switch f := f.(type) {
			case BootAck:
				if c.acked {
					c.drop(junk("a second boot-ack"), 0)
					continue
				}
				c.acked = true
				sendRun()
			case Done:
				return c.settleDone(start, doneResult(f, s.limits))
			}
		case <-readDone:
			readDone = nil
			if errors.Is(c.readErr, ErrFrameTooLarge) {
				return c.settle(start, workerExit(fmt.Sprintf("protocol frame exceeded %d bytes on fd 3", c.boot.frameCap)), graceful)
			}
			if gone {
				return c.settle(start, c.exitResult(), killNow)
			}
			// fd 3 closed with python still running: the wall clock, or its exit, ends it.
		case <-exited:
			exited, gone = nil, true
			c.proc.Kill() // stragglers in its group
			if readDone == nil {
				return c.settle(start, c.exitResult(), killNow)
			}
			poll = time.NewTicker(exitPoll)
			pollC = poll.C
			idle, seen = time.Now(), c.readBytes.Load()
			settleBy = idle.Add(exitMostWait)
		case now := <-pollC:
			n := c.readBytes.Load()
			reading := n != seen || !c.inRead.Load() // still reading, or busy with what it read
			// Past settleBy, the reader waiting in a read is reading what came after the
			// exit: python could not exit before the host took all but the socket's buffer
			// of what it wrote. A frame still being judged keeps the reader out of reads.
			late := !now.Before(settleBy) && c.inRead.Load()
			if late || !reading && now.Sub(idle) >= exitIdleWait {
				return c.settle(start, c.exitResult(), killNow)
			}
			if reading {
				idle, seen = now, n
			}
		case <-c.out3.stalled:
			return c.settle(start, workerExit(fmt.Sprintf("reply queue exceeded %d replies or %d bytes, unread for %v: the program does not read its replies",
				MaxRepliesQueued, MaxReplyQueueBytes, ReplyStall)), graceful)
		case <-wall.C:
			return c.settle(start, Result{Status: StatusTimeout, Error: "wall-clock limit of " + s.limits.Wall.String() + " reached"}, graceful)
		case <-ctx.Done():
			return c.settle(start, Result{Status: StatusAbort, Error: "run aborted: " + context.Cause(ctx).Error()}, graceful)
		}
	}
}

// doneResult turns a done frame into a result, metering its value again: over budget wins
// over not lossless, as on the child's side. An error message is cut to the value
// budget, but for output-limit, whose message is the host's own: the child's is fixed
// text, which a small budget would cut to nothing.
func doneResult(f Done, limits Limits) Result {
	overBudget := fmt.Sprintf("completion value exceeded %d bytes", limits.MaxValueBytes)
	if e := f.Error; e != nil {
		if e.Kind == StatusOutputLimit {
			return Result{Status: e.Kind, Error: overBudget}
		}
		return Result{Status: e.Kind, Error: capMessage(sanitize(e.Message), limits.MaxValueBytes)}
	}
	switch lossless.Check(f.Value, limits.MaxValueBytes) {
	case lossless.ErrTooLarge:
		return Result{Status: StatusOutputLimit, Error: overBudget}
	case lossless.ErrLossy:
		return Result{Status: StatusInvalidOutput, Error: "completion value is not lossless JSON: it holds NaN, an infinity or -0"}
	}
	return Result{Status: StatusOK, Value: f.Value}
}

// capMessage cuts msg to limit bytes on a character boundary, truncatedSuffix
// reserved inside the cap.
func capMessage(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	suffix := truncatedSuffix
	if limit < len(suffix) {
		msg, suffix = suffix, "" // no room for a message: the suffix alone, cut
	}
	head, _ := textcut.Prefix(msg, limit-len(suffix))
	return head + suffix
}

func workerExit(msg string) Result {
	return Result{Status: StatusWorkerExit, Error: msg, ExitCode: -1}
}

// exitResult classifies python's exit without a done frame. SIGXCPU is the CPU limit;
// so is a SIGKILL the host did not send once python used its CPU time, which is the
// kernel's hard limit ending a program that ignored, blocked or trapped SIGXCPU.
func (c *child) exitResult() Result {
	e, _ := c.proc.Ended()
	ws := e.Status
	if !ws.Signaled() {
		r := workerExit(fmt.Sprintf("python exited (code=%d)", ws.ExitStatus()))
		r.ExitCode = ws.ExitStatus()
		return r
	}
	sig := ws.Signal()
	if sig == syscall.SIGXCPU || sig == syscall.SIGKILL && e.CPU >= c.cpuLimit-cpuSlack {
		res := c.cpuExhausted(Result{})
		res.Signal = signalName(sig)
		return res
	}
	r := workerExit(fmt.Sprintf("python exited (signal=%s)", signalName(sig)))
	r.Signal = signalName(sig)
	return r
}

// cpuExhausted is res turned into the timeout of a child that used its CPU time.
func (c *child) cpuExhausted(res Result) Result {
	return Result{
		Status:   StatusTimeout,
		Error:    fmt.Sprintf("CPU time limit of %ds exhausted", c.boot.limits.CPUSeconds),
		ExitCode: -1,
		Logs:     res.Logs,
		Wall:     res.Wall,
		CPU:      res.CPU,
		Dropped:  res.Dropped,
	}
}

// settle ends the run with res: it stops taking frames, ends the process group as how
// says, waits for the output pipes (at most the grace, so a descendant that left the
// group cannot hold the run), closes fd 3, and removes the run directory.
func (c *child) settle(start time.Time, res Result, how ending) Result {
	res.Wall = time.Since(start)
	c.end(how)
	res.Logs = c.ledger.close()
	res.CPU = c.cpu()
	res.Dropped = int(c.dropped.Load())
	res.Sandbox = c.confined
	c.log.Debug("program settled", "status", res.Status, "wall", res.Wall, "cpu", res.CPU, "dropped", res.Dropped)
	return res
}

// settleDone ends the run on its done frame, without waiting on python's exit: it
// stops taking frames, waits only for the raw output written before now to reach the
// ledger, reads python's CPU time, and sends the process group SIGKILL. Reaping the
// group, releasing the pipes and removing the run directory finish in the background,
// counted by the Runner, whose Close waits for them.
func (c *child) settleDone(start time.Time, res Result) Result {
	res.Wall = time.Since(start)
	c.stopped.Store(true)
	close(c.stop)
	c.out3.close()
	ctx, cancel := context.WithTimeout(context.Background(), c.r.grace)
	c.proc.Flush(ctx)
	cancel()
	for _, p := range c.out {
		p.flush()
	}
	res.Logs = c.ledger.close()
	res.CPU = c.cpu()
	res.Dropped = int(c.dropped.Load())
	if res.CPU >= c.cpuLimit {
		// The child's own re-check at completion is the program's to defeat: the host
		// holds it to its CPU limit whatever its done frame says.
		res = c.cpuExhausted(res)
	}
	res.Sandbox = c.confined
	c.proc.Kill()
	c.r.wg.Add(1)
	go func() {
		defer c.r.wg.Done()
		c.teardown(killNow)
	}()
	c.log.Debug("program settled", "status", res.Status, "wall", res.Wall, "cpu", res.CPU, "dropped", res.Dropped)
	return res
}

// cpu returns python's CPU time so far.
func (c *child) cpu() time.Duration {
	d, _ := c.proc.CPU()
	return d
}

// end stops taking frames, then tears the child down.
func (c *child) end(how ending) {
	c.stopped.Store(true)
	close(c.stop)
	c.out3.close()
	c.teardown(how)
}

// teardown ends the process group as how says, waits for the output pipes (at most
// the grace, so a descendant that left the group cannot hold it), closes fd 3, and
// removes the run directory.
func (c *child) teardown(how ending) {
	grace := c.r.grace
	if how == graceful {
		c.proc.Stop(context.Background(), grace)
	} else {
		c.proc.Kill()
		<-c.proc.Exited()
		c.proc.Kill()
		c.proc.Release(grace)
	}
	c.reapGroup(time.Now().Add(stragglerWait))
	c.conn.Close()
	<-c.readDone
	for _, p := range c.out {
		p.flush()
	}
	if err := scratch.RemoveAll(c.dir); err != nil {
		c.log.Warn("removing the run directory", "dir", c.dir, "err", err)
	}
}

// reapGroup kills what is left of the child's process group, its leader reaped, until
// it is gone or deadline passes.
func (c *child) reapGroup(deadline time.Time) {
	pgid := c.proc.Pid()
	for {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
			return // ESRCH: none left
		}
		if !c.groupLive(pgid) {
			return // only zombies, which their new parent reaps
		}
		if time.Now().After(deadline) {
			c.log.Warn("process group survived SIGKILL", "pgid", pgid)
			return
		}
		time.Sleep(stragglerPoll)
	}
}

// groupLive reports whether a process of group pgid is alive (not a zombie). A child
// in a cgroup of its own looks only at the processes of that cgroup, which its group's
// are (none leaves it); another, at every process.
func (c *child) groupLive(pgid int) bool {
	want := strconv.Itoa(pgid)
	if pids, ok := c.confined.Pids(); ok {
		return slices.ContainsFunc(pids, func(pid int) bool { return liveIn(strconv.Itoa(pid), want) })
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	return slices.ContainsFunc(entries, func(e os.DirEntry) bool {
		return e.Name()[0] >= '0' && e.Name()[0] <= '9' && liveIn(e.Name(), want)
	})
}

// liveIn reports whether process pid is alive (not a zombie) and in process group
// pgid, from /proc/<pid>/stat.
func liveIn(pid, pgid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) >= 3 && fields[2] == pgid && fields[0] != "Z" && fields[0] != "X"
}

// discard ends an idle or failed child.
func (c *child) discard() {
	c.end(killNow)
	c.ledger.close()
}

// invoke runs the binding call names and makes its reply.
func invoke(ctx context.Context, s *spec, call Call, id int64) (r Reply) {
	r.ID = id
	fn := s.funcs[call.Global][call.Name]
	if fn == nil {
		r.Message = "unknown binding " + preview(call.Global, call.Name, s.limits.MaxValueBytes)
		return r
	}
	defer func() {
		if p := recover(); p != nil {
			r = Reply{ID: id, Message: fmt.Sprintf("binding %s.%s panicked: %v", call.Global, call.Name, p)}
		}
	}()
	v, err := fn(ctx, call.Args)
	if err != nil {
		r.Message = err.Error()
		if r.Message == "" {
			r.Message = "binding call rejected"
		}
		return r
	}
	r.OK, r.Value = true, v // made lossless, or refused, as its frame is made
	return r
}

// preview quotes global.name for an unknown-binding message: each cut to limit bytes,
// the whole to its first previewBytes, escaped as a JSON string.
func preview(global, name string, limit int) string {
	global, _ = textcut.Prefix(global, limit)
	name, _ = textcut.Prefix(name, limit)
	whole, cutShort := textcut.Prefix(global+"."+name, previewBytes)
	q := lossless.Encode(lossless.String(sanitize(whole)))
	if cutShort {
		return string(q[:len(q)-1]) + `…"`
	}
	return string(q)
}

// signalName is the conventional name of sig: "SIGKILL".
func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
		syscall.SIGFPE: "SIGFPE", syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL",
		syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
		syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGSYS: "SIGSYS",
		syscall.SIGTERM: "SIGTERM", syscall.SIGTRAP: "SIGTRAP", syscall.SIGUSR1: "SIGUSR1",
		syscall.SIGUSR2: "SIGUSR2", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(sig))
}

// install writes the packages' archive as the file pkg, and returns how long it waited
// for the archive to be made (the first spawn of a Runner makes it; see Runner.archive).
func (r *Runner) install(ctx context.Context, pkg string) (setup time.Duration, err error) {
	made := time.Now()
	data, err := r.archive.get(ctx, &r.wg)
	setup = time.Since(made)
	if err == nil {
		err = os.WriteFile(pkg, data, 0o600)
	}
	if err != nil {
		return setup, fmt.Errorf("program: installing the Python packages: %w", err)
	}
	return setup, nil
}
