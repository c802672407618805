// Package proc starts and supervises the Python processes kiln runs: each in its own
// process group (or, when asked, as init of its own PID namespace), killed with the host
// if the host dies, its raw output drained continuously, and stopped with a grace then a
// kill of the whole group and of every descendant.
//
// Signals reach a process through its pidfd where the kernel has them, and a process
// group is signalled only while its leader is unreaped, so that no signal reaches a
// process that took over a reused process id.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Command describes a process to start.
type Command struct {
	Path  string   // executable; looked up in PATH when it has no slash
	Args  []string // arguments after the program name
	Env   []string // the whole environment
	Dir   string   // working directory; empty means the host's
	Stdin []byte   // written to the child's stdin, which is then closed
	// Stdout and Stderr receive the child's raw output as it arrives. Nil means a
	// Tail of TailSize, reachable through the Process.
	Stdout, Stderr io.Writer
	// ExtraFiles become the child's fds 3, 4, … (see os/exec.Cmd.ExtraFiles).
	ExtraFiles []*os.File
	// Contain makes the child init of a PID namespace of its own (in a user namespace
	// of its own that maps the host's user and group to themselves), so that the kernel
	// ends every process it starts, by any route, when it ends, and it ends with the
	// host. Where the kernel refuses namespaces, the child is started as without
	// Contain; Process.Namespaced says which. As init, the child receives only the
	// signals it handles (SIGKILL always): SIGTERM without a handler is ignored.
	Contain bool
	// Namespaces are more CLONE_NEW* flags (mount, IPC, network) for a contained
	// child's clone, beside the user and PID namespaces of Contain.
	Namespaces uintptr
	// MustContain makes a start that the kernel refuses namespaces fail with
	// ErrNamespaces instead of falling back to a process group.
	MustContain bool
	// Name is the child's argv[0]; empty means Path.
	Name string
	// Front is the status pipe of an init in front of the child's program (see
	// Front); its File must be among ExtraFiles. Nil: the child is the program.
	Front *Front
	// AmbientCaps are capabilities a contained child keeps through its exec in its
	// user namespace, where it is not root.
	AmbientCaps []uintptr
}

// Process is a started child: the leader of its own process group.
type Process struct {
	cmd        *exec.Cmd
	pidfd      int  // the supervisor's own pidfd of the child; -1 where the kernel has none
	namespaced bool // the child is init of its own PID namespace
	front      *Front
	program    atomic.Int64 // the host's pid of the program an init fronts, once found
	stdout     io.Writer
	stderr     io.Writer

	exited  chan struct{} // closed once the leader has been reaped
	drained chan struct{} // closed once both output pipes reached EOF or were abandoned
	pipes   []*os.File    // read ends of stdout and stderr
	counts  [2]copyCount  // per pipe: bytes read from it and bytes delivered to its sink

	// mu orders signals to the group against the leader's reaping: the group is
	// signalled only while reaped is false.
	mu     sync.Mutex
	reaped bool
	state  *os.ProcessState
	err    error
	// fronted: an init reported ended, the wait status of the program it fronted.
	fronted bool
	ended   syscall.WaitStatus
}

// ErrNotStarted is returned for a command that could not be started.
var ErrNotStarted = errors.New("proc: not started")

// ErrNamespaces is a start with MustContain that the kernel refused namespaces.
var ErrNamespaces = errors.New("proc: the kernel refuses the namespaces")

// Start starts c. The child leads a new process group, and is sent SIGKILL by the
// kernel if the host dies. It holds no descriptor this process inherited
// (KeepInherited).
func Start(c Command) (*Process, error) {
	if err := KeepInherited(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	p := newProcess(c)
	path := c.Path
	if lp, err := exec.LookPath(path); err == nil {
		path = lp
	} else {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}

	stdinW, childEnds, err := p.pipes3()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	stdinR, outW, errW := childEnds[0], childEnds[1], childEnds[2]
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(path, c.Args...)
		if c.Name != "" {
			cmd.Args[0] = c.Name
		}
		cmd.Env = c.Env
		cmd.Dir = c.Dir
		cmd.ExtraFiles = c.ExtraFiles
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, outW, errW
		return cmd
	}

	started := make(chan error, 1)
	go p.supervise(newCmd, c, started)
	err = <-started
	if err == nil && c.Front != nil {
		front := c.Front.started()
		p.mu.Lock() // the reaper reads it
		p.front = front
		p.mu.Unlock()
	}
	if err != nil {
		stdinW.Close()
		for _, f := range p.pipes {
			f.Close()
		}
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	p.feed(stdinW, c.Stdin)
	return p, nil
}

// newProcess is the Process of c, before its start.
func newProcess(c Command) *Process {
	p := &Process{pidfd: -1, exited: make(chan struct{}), drained: make(chan struct{}), stdout: c.Stdout, stderr: c.Stderr}
	if p.stdout == nil {
		p.stdout = NewTail(TailSize)
	}
	if p.stderr == nil {
		p.stderr = NewTail(TailSize)
	}
	return p
}

// pipes3 makes the child's stdin, stdout and stderr pipes: it keeps the read ends of
// stdout and stderr in p and returns stdin's write end and the child's ends.
func (p *Process) pipes3() (stdinW *os.File, childEnds []*os.File, err error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		outR.Close()
		outW.Close()
		return nil, nil, fmt.Errorf("stderr pipe: %w", err)
	}
	p.pipes = []*os.File{outR, errR}
	return stdinW, []*os.File{stdinR, outW, errW}, nil
}

// feed writes stdin to the started child and closes it, then drains its output.
func (p *Process) feed(stdinW *os.File, stdin []byte) {
	// The stdin payload is small enough for the pipe's buffer, so this write does not wait
	// for the child to read it.
	if len(stdin) > 0 {
		stdinW.Write(stdin)
	}
	stdinW.Close()

	var drains sync.WaitGroup
	for i, sink := range []io.Writer{p.stdout, p.stderr} {
		drains.Add(1)
		go func() {
			defer drains.Done()
			p.copyOut(i, sink)
		}()
	}
	go func() {
		drains.Wait()
		close(p.drained)
	}()
}

// supervise starts the child, reports the outcome on started, and if it started waits
// for it to exit, kills what is left of its group and reaps it.
//
// The kernel sends the parent-death signal when the thread that started the child
// ends, not the process (golang/go#27505), and the Go runtime ends a thread whose
// locked goroutine returns: so the thread is locked for the child's whole life and
// unlocked only once it is reaped.
func (p *Process) supervise(newCmd func() *exec.Cmd, c Command, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd, err := p.spawn(newCmd, c)
	if err != nil {
		started <- err
		return
	}
	p.cmd = cmd
	started <- nil
	p.reap()
}

// reap waits for the started child to exit, kills what is left of its group and reaps
// it.
func (p *Process) reap() {
	pid := p.cmd.Process.Pid
	awaitExit(pid, p.pidfd) // without reaping: the group's id stays the leader's
	p.mu.Lock()
	if !p.namespaced {
		syscall.Kill(-pid, syscall.SIGKILL) // members that stayed in the group
	}
	state, err := p.cmd.Process.Wait()
	var program syscall.WaitStatus
	fronted := false
	if p.front != nil {
		program, fronted = p.front.status() // written before the init exited
	}
	p.state, p.err, p.reaped = state, err, true
	p.ended, p.fronted = program, fronted
	p.mu.Unlock()
	if p.pidfd >= 0 {
		syscall.Close(p.pidfd)
	}
	close(p.exited)
}

// copyCount counts what one output pipe's copier has done.
type copyCount struct {
	read      atomic.Int64 // bytes read from the pipe
	delivered atomic.Int64 // bytes written to the sink
	done      atomic.Bool  // the pipe reached EOF or was closed
}

// copyOut copies pipe i to sink, as io.Copy would, counting as it goes.
func (p *Process) copyOut(i int, sink io.Writer) {
	c := &p.counts[i]
	defer c.done.Store(true)
	buf := make([]byte, 32<<10)
	for {
		n, err := p.pipes[i].Read(buf)
		if n > 0 {
			c.read.Add(int64(n))
			sink.Write(buf[:n])
			c.delivered.Add(int64(n))
		}
		if err != nil {
			return
		}
	}
}

// flushPoll is how often Flush looks at the copiers while they catch up.
const flushPoll = 50 * time.Microsecond

// Flush waits until everything the process group had written to stdout and stderr
// when Flush was called has been delivered to the sinks, without waiting for the pipes
// to end: what is still in a pipe then counts, as does what a copier has read and not
// yet delivered. It returns ctx's error if ctx ends first, and nil at once for a pipe
// that has ended or been abandoned.
func (p *Process) Flush(ctx context.Context) error {
	for i, f := range p.pipes {
		c := &p.counts[i]
		var target int64
		for {
			before := c.read.Load()
			pending, err := unread(f)
			if err != nil {
				target = -1 // closed by Release: nothing more to wait for
				break
			}
			if c.read.Load() == before { // no read in between: a consistent count
				target = before + int64(pending)
				break
			}
		}
		for c.delivered.Load() < target && !c.done.Load() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(flushPoll):
			}
		}
	}
	return nil
}

// unread returns how many bytes wait in the pipe f (FIONREAD).
func unread(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int32
	var ioctlErr syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, ioctlErr = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil {
		return 0, err
	}
	if ioctlErr != 0 {
		return 0, ioctlErr
	}
	return int(n), nil
}

// Pid is the child's process id (in the host's PID namespace), which is also its
// process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// ErrReaped is WhileUnreaped's answer once the child has been reaped.
var ErrReaped = errors.New("proc: the child has been reaped")

// WhileUnreaped calls fn with the child's pid while the child cannot be reaped, so that
// the pid names the child, alive or a zombie, and no other process. fn must be short:
// the reaping waits for it. Once the child has been reaped it returns ErrReaped
// without calling fn.
func (p *Process) WhileUnreaped(fn func(pid int) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return ErrReaped
	}
	return fn(p.Pid())
}

// Namespaced reports whether the child is init of a PID namespace of its own (see
// Command.Contain): then every process it started ends when it does.
func (p *Process) Namespaced() bool { return p.namespaced }

// Exited is closed once the child has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Drained is closed once everything the process group wrote to stdout and stderr has
// been delivered to the sinks, or abandoned by Release.
func (p *Process) Drained() <-chan struct{} { return p.drained }

// State is the child's exit state; nil until it has exited.
func (p *Process) State() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// StdoutTail and StderrTail return the default sinks, or nil when the command named its
// own.
func (p *Process) StdoutTail() *Tail { t, _ := p.stdout.(*Tail); return t }

// StderrTail returns the child's stderr Tail; see StdoutTail.
func (p *Process) StderrTail() *Tail { t, _ := p.stderr.(*Tail); return t }

// Signal sends sig to the child alone, not to the rest of its group, through its pidfd
// where the kernel has one; a child that has already exited is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// SignalGroup sends sig to every process in the child's group, as long as the child
// has not been reaped; after that it does nothing, since the group is gone and its id
// may be another's.
func (p *Process) SignalGroup(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	err := syscall.Kill(-p.Pid(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Kill ends the child and everything it started. For a namespaced child that is one
// SIGKILL: the kernel ends the rest of the namespace. Otherwise every live descendant
// (see sweep) and the whole group get SIGKILL, while the child is not yet reaped.
func (p *Process) Kill() {
	if p.namespaced {
		p.Signal(syscall.SIGKILL)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return
	}
	// Stopped first, so that it cannot see its children die and exit on its own terms
	// (a shell's "Killed", exit status 137) before its own SIGKILL.
	p.Signal(syscall.SIGSTOP)
	sweep(p.Pid())
	syscall.Kill(-p.Pid(), syscall.SIGKILL)
}

// Stop ends the group: SIGTERM, then SIGKILL once grace has passed without the leader
// exiting. After the leader is gone it kills the group again, so that no member that
// stayed in it survives, and it waits at most grace more for the output pipes before
// abandoning them to a process that left the group. It returns when the leader has been
// reaped, or when ctx ends.
func (p *Process) Stop(ctx context.Context, grace time.Duration) error {
	p.SignalGroup(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
	case <-ctx.Done():
		p.Kill()
		return ctx.Err()
	}
	p.Kill()
	select {
	case <-p.exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.Release(grace)
	return nil
}

// Release waits up to wait for the output pipes to reach EOF, then closes them, so that
// a descendant that escaped the group and holds them cannot keep the host waiting, and
// no pipe stays open until the garbage collector finds it.
func (p *Process) Release(wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-p.drained:
	case <-timer.C:
	}
	for _, f := range p.pipes {
		f.Close() // a copier still reading ends
	}
	<-p.drained
}

// Describe says how the child's program ended, for error messages: "exit status 3",
// "signal: killed".
func (p *Process) Describe() string {
	if e, ok := p.Ended(); ok {
		return describe(e.Status)
	}
	return "still running"
}
