package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Front is the status pipe of an init in front of a child's program
// (python/kiln/nsinit.py): the child, init of its PID namespace, forks the program,
// relays signals to it, reaps every orphan of the namespace, and once the program has
// ended writes its wait status on the pipe and exits. The Process of a
// command with a Front then speaks of the program: Ended, CPU and Describe.
//
// One Front serves every attempt to start its command (a start made again, or a fork
// that falls back to a spawn): each started child's Process reads a copy of its own.
type Front struct {
	r, w *os.File
}

// NewFront makes a Front. Its File goes in the command's ExtraFiles, and the child must
// be told its descriptor. The caller closes it once the command has started, or failed
// to.
func NewFront() (*Front, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("proc: the init's status pipe: %w", err)
	}
	return &Front{r: r, w: w}, nil
}

// File is the pipe's write end, the child's.
func (f *Front) File() *os.File { return f.w }

// Close closes this process's ends of the pipe; the Process of a child started with it
// keeps its own copy of the read end.
func (f *Front) Close() {
	f.r.Close()
	f.w.Close()
}

// started is the Front of a child just started with f: a copy of the read end for its
// Process alone, emptied first of what the init of a discarded earlier attempt may have
// written. Nil when no copy can be made: the Process then speaks of the init itself.
func (f *Front) started() *Front {
	rc, err := f.r.SyscallConn()
	if err != nil {
		return nil
	}
	dup := -1
	rc.Control(func(fd uintptr) {
		buf := make([]byte, maxFrontReport)
		for { // the pipe is non-blocking: this ends at EAGAIN
			if n, err := syscall.Read(int(fd), buf); n <= 0 || err != nil {
				break
			}
		}
		dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err != nil || dup < 0 {
		return nil
	}
	return &Front{r: os.NewFile(uintptr(dup), "init status")}
}

// maxFrontReport bounds what is read of an init's report: one decimal wait status.
const maxFrontReport = 32

// status reads the init's report, once the child has exited, and closes the pipe. False
// when there is none: no init fronted the program (the kernel refused the namespace),
// or it was killed before the program ended.
func (f *Front) status() (syscall.WaitStatus, bool) {
	defer f.r.Close()
	rc, err := f.r.SyscallConn()
	if err != nil {
		return 0, false
	}
	buf := make([]byte, maxFrontReport)
	n := 0
	rc.Read(func(fd uintptr) bool {
		n, err = syscall.Read(int(fd), buf) // once, without waiting: the pipe is non-blocking
		return true
	})
	if err != nil || n <= 0 {
		return 0, false
	}
	line, ok := bytes.CutSuffix(buf[:n], []byte("\n"))
	if !ok {
		return 0, false
	}
	ws, err := strconv.ParseUint(string(line), 10, 32)
	if err != nil {
		return 0, false
	}
	return syscall.WaitStatus(ws), true
}

// Exit is how a child's program ended.
type Exit struct {
	// Status is the program's wait status: the one its init reported, where an init
	// fronted it, else the child's own.
	Status syscall.WaitStatus
	// CPU is the user and system time of the child and of every process it waited for:
	// an init's, that of the program and of the orphans it reaped.
	CPU time.Duration
}

// Ended is how the child's program ended; false until the child has been reaped.
func (p *Process) Ended() (Exit, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return Exit{}, false
	}
	e := Exit{CPU: p.state.UserTime() + p.state.SystemTime()}
	e.Status, _ = p.state.Sys().(syscall.WaitStatus)
	if p.fronted {
		e.Status = p.ended
	}
	return e, true
}

// describe says how a wait status ended a process, as os.ProcessState does.
func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled() && ws.CoreDump():
		return "signal: " + ws.Signal().String() + " (core dumped)"
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}

// Program is the host's pid of the child's program, where an init fronts it, else the
// child itself. The program is the init's first child, so of its children the one with
// the lowest pid in the namespace: the orphans it reaps came after. It is 0 before the
// init has forked it and once the init has reaped it.
func (p *Process) Program() int {
	if p.front == nil || !p.namespaced {
		return p.Pid()
	}
	init := p.Pid()
	if pid := int(p.program.Load()); pid > 0 {
		if ppid, _, ok := readStat(pid); ok && ppid == init {
			return pid
		}
		return 0
	}
	first, lowest := 0, 0
	for _, pid := range children(init) {
		if n := nsPID(pid); n > 0 && (lowest == 0 || n < lowest) {
			first, lowest = pid, n
		}
	}
	if first == 0 {
		return 0
	}
	if ppid, _, ok := readStat(first); !ok || ppid != init {
		return 0
	}
	p.program.Store(int64(first))
	return first
}

// nsPID is pid's process id in its innermost PID namespace, from its status; 0 if it
// cannot be read.
func nsPID(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
			fields := bytes.Fields(rest)
			if len(fields) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(string(fields[len(fields)-1]))
			return n
		}
	}
	return 0
}

// frontedCPU is the CPU time of a live init and what it fronts: its own and that of
// the children it reaped (the program's, once it has ended), and the program's while
// it runs. The init's is read before and after the program's, again if it changed
// between, so that a program reaped meanwhile is counted once.
func (p *Process) frontedCPU() (time.Duration, error) {
	stat := "/proc/" + strconv.Itoa(p.Pid()) + "/stat"
	var after time.Duration
	for range 3 {
		before, err := statTimes(stat, true)
		if err != nil {
			return 0, err
		}
		var program time.Duration
		if pid := p.Program(); pid > 0 {
			program, _ = ProcessCPU(pid)
		}
		if after, err = statTimes(stat, true); err != nil {
			return 0, err
		}
		if before == after {
			return before + program, nil
		}
	}
	return after, nil
}
