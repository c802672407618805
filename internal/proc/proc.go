// Package proc starts and supervises the Python processes kiln runs: each in its own
// process group, killed with the host if the host dies, its raw output drained
// continuously, and stopped with a grace then a kill of the whole group.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
}

// Process is a started child: the leader of its own process group.
type Process struct {
	cmd    *exec.Cmd
	stdout io.Writer
	stderr io.Writer

	exited  chan struct{} // closed once the leader has been reaped
	drained chan struct{} // closed once both output pipes reached EOF or were abandoned
	pipes   []*os.File    // read ends of stdout and stderr
	counts  [2]copyCount  // per pipe: bytes read from it and bytes delivered to its sink

	mu    sync.Mutex
	state *os.ProcessState
	err   error
}

// ErrNotStarted is returned for a command that could not be started.
var ErrNotStarted = errors.New("proc: not started")

// Start starts c. The child leads a new process group, and is sent SIGKILL by the
// kernel if the host dies.
func Start(c Command) (*Process, error) {
	p := &Process{exited: make(chan struct{}), drained: make(chan struct{}), stdout: c.Stdout, stderr: c.Stderr}
	if p.stdout == nil {
		p.stdout = NewTail(TailSize)
	}
	if p.stderr == nil {
		p.stderr = NewTail(TailSize)
	}
	path := c.Path
	if lp, err := exec.LookPath(path); err == nil {
		path = lp
	} else {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	cmd := exec.Command(path, c.Args...)
	cmd.Env = c.Env
	cmd.Dir = c.Dir
	cmd.ExtraFiles = c.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: stdin pipe: %w", ErrNotStarted, err)
	}
	childEnds = append(childEnds, stdinR)
	cmd.Stdin = stdinR
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinW.Close()
		return nil, fmt.Errorf("%w: stdout pipe: %w", ErrNotStarted, err)
	}
	childEnds = append(childEnds, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		stdinW.Close()
		outR.Close()
		return nil, fmt.Errorf("%w: stderr pipe: %w", ErrNotStarted, err)
	}
	childEnds = append(childEnds, errW)
	cmd.Stdout, cmd.Stderr = outW, errW
	p.pipes = []*os.File{outR, errR}

	if err := cmd.Start(); err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	p.cmd = cmd
	// The stdin payload is small enough for the pipe's buffer, so this write does not wait
	// for the child to read it.
	if len(c.Stdin) > 0 {
		stdinW.Write(c.Stdin)
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
	go func() {
		state, err := cmd.Process.Wait()
		p.mu.Lock()
		p.state, p.err = state, err
		p.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
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

// Pid is the child's process id, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

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

// Signal sends sig to the child alone, not to the rest of its group; a child that has
// already exited is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	err := syscall.Kill(p.Pid(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// SignalGroup sends sig to every process in the child's group.
func (p *Process) SignalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-p.Pid(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Kill sends SIGKILL to the whole group.
func (p *Process) Kill() { p.SignalGroup(syscall.SIGKILL) }

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
// a descendant that escaped the group and holds them cannot keep the host waiting.
func (p *Process) Release(wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-p.drained:
	case <-timer.C:
		for _, f := range p.pipes {
			f.Close()
		}
		<-p.drained
	}
}

// Describe says how the child ended, for error messages: "exit status 3", "signal: killed".
func (p *Process) Describe() string {
	if s := p.State(); s != nil {
		return s.String()
	}
	return "still running"
}
