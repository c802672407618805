package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"

	"golang.org/x/sys/unix"
)

// ErrNotChild is a pid handed over that does not name a child of this process.
var ErrNotChild = errors.New("proc: not a child of this process")

// A Handoff is a child that another process starts for this one (a zygote, which
// clones it with CLONE_PARENT): this process makes its standard streams and hands their
// child ends, with the command's ExtraFiles, to the starter; the child, once started, is
// this process's own, adopted by its pid, and supervised as a child Start started. The
// command's Path, Args, Env and Dir are the starter's to apply.
type Handoff struct {
	p       *Process
	c       Command
	stdinW  *os.File
	files   []*os.File // the child's ends: stdin, stdout, stderr
	adopted bool
}

// NewHandoff makes the streams of a child of c that another process starts.
func NewHandoff(c Command) (*Handoff, error) {
	p := newProcess(c)
	stdinW, ends, err := p.pipes3()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	return &Handoff{p: p, c: c, stdinW: stdinW, files: ends}, nil
}

// Files are what the starter gives the child, in order, as its fds 0, 1, 2, 3, …: its
// stdin, stdout and stderr, then the command's ExtraFiles.
func (h *Handoff) Files() []*os.File { return append(slices.Clip(h.files), h.c.ExtraFiles...) }

// Adopt takes the child pid, which the starter started with Files, as this process's:
// pid must be an unreaped child of this one (then it cannot name another process). The
// child is supervised, its stdin written and its output drained as Start does;
// namespaced says whether it is init of a PID namespace of its own. The handoff's
// streams are closed either way.
func (h *Handoff) Adopt(pid int, namespaced bool) (*Process, error) {
	h.closeEnds()
	if h.adopted {
		return nil, fmt.Errorf("%w: adopted twice", ErrNotStarted)
	}
	h.adopted = true
	p := h.p
	fail := func(err error) (*Process, error) {
		h.stdinW.Close()
		for _, f := range p.pipes {
			f.Close()
		}
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	if ppid, _, ok := readStat(pid); !ok || ppid != os.Getpid() {
		return fail(fmt.Errorf("%w: pid %d", ErrNotChild, pid))
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fail(fmt.Errorf("pidfd of %d: %w", pid, err))
	}
	osp, err := os.FindProcess(pid)
	if err != nil {
		unix.Close(fd)
		return fail(err)
	}
	p.pidfd, p.namespaced = fd, namespaced
	p.cmd = &exec.Cmd{Process: osp}
	if h.c.Front != nil {
		p.front = h.c.Front.started()
	}
	go p.reap()
	p.feed(h.stdinW, h.c.Stdin)
	return p, nil
}

// Close closes the handoff's streams; a handoff not adopted is abandoned.
func (h *Handoff) Close() {
	h.closeEnds()
	if !h.adopted {
		h.adopted = true
		h.stdinW.Close()
		for _, f := range h.p.pipes {
			f.Close()
		}
	}
}

// closeEnds closes this process's copies of the child's ends.
func (h *Handoff) closeEnds() {
	for _, f := range h.files {
		f.Close()
	}
	h.files = nil
}
