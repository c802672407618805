package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kilnrt/kiln/internal/procfs"
)

// spawn starts the child on the calling (locked) thread: first, when c.Contain asks, as
// init of new user and PID namespaces (and those of c.Namespaces), and if the kernel
// refuses that, as the leader of a new process group alone, unless c.MustContain. It
// records the child's pidfd and whether it is namespaced.
func (p *Process) spawn(newCmd func() *exec.Cmd, c Command) (*exec.Cmd, error) {
	if (c.Contain || c.MustContain) && !procfs.NamesSelf() {
		// A user namespace's maps are written to /proc/<child>/, which names another
		// process here: as a kernel that refuses namespaces.
		if c.MustContain {
			return nil, fmt.Errorf("%w: this process's PID namespace is not the one /proc names (a kiln started from a cell?), so a child's user and group maps cannot be written", ErrNamespaces)
		}
		p.pidfd = -1
	} else if c.Contain || c.MustContain {
		cmd := newCmd()
		cmd.SysProcAttr = p.attr()
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | c.Namespaces
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		cmd.SysProcAttr.AmbientCaps = c.AmbientCaps
		err := cmd.Start()
		if err == nil {
			p.namespaced = true
			return cmd, nil
		}
		if !namespacesRefused(err) {
			return nil, err
		}
		if c.MustContain {
			return nil, fmt.Errorf("%w: %w", ErrNamespaces, err)
		}
		p.pidfd = -1
	}
	cmd := newCmd()
	cmd.SysProcAttr = p.attr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// attr is the process attributes every child gets: its own group, SIGKILL when the
// thread that started it ends, and a pidfd for p.
func (p *Process) attr() *syscall.SysProcAttr {
	p.pidfd = -1
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &p.pidfd}
}

// namespacesRefused reports whether err is how the kernel refuses new user or PID
// namespaces: not permitted (a sysctl, a seccomp filter, a container), not built in, or
// over the limit of namespaces.
func namespacesRefused(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EUSERS)
}

// awaitExit blocks until the child pid has exited, leaving it unreaped (a zombie) so
// that its pid and group id are not reused while its group is still signalled. With a
// pidfd it waits in the runtime's poller, holding no thread: a daemon supervises a
// child of each session, and a thread blocked in waitid for each would reach the
// runtime's bound on threads long before the host's bound on processes.
func awaitExit(pid, pidfd int) {
	if pidfd >= 0 && pollExit(pidfd) {
		return
	}
	var info unix.Siginfo
	for {
		var err error
		if pidfd >= 0 {
			err = unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOWAIT, nil)
		} else {
			err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		}
		if err != unix.EINTR {
			return
		}
	}
}

// pollExit waits in the runtime's poller for the child of pidfd to exit, leaving it
// unreaped; false where the poller cannot watch the pidfd, to wait in waitid instead.
func pollExit(pidfd int) bool {
	dup, err := unix.FcntlInt(uintptr(pidfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return false
	}
	f := os.NewFile(uintptr(dup), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		switch err {
		case nil: // an exited child fills info; one still running leaves it zero
			exited = info.Signo != 0
		case unix.EAGAIN, unix.EINTR: // a nonblocking pidfd's child still running
		default:
			exited = true // nothing to wait for, as a blocking waitid would say
		}
		return exited
	})
	return err == nil && exited
}

// sweepRounds bounds how often sweep walks the tree again after killing what it found,
// for processes that forked while it walked.
const sweepRounds = 16

// sweep kills every live descendant of root that /proc shows, root excepted, including
// those that left root's process group or session. Each round stops every process as it
// is found, through a pidfd opened and then checked to be the child of the process it
// was listed under (so a reused pid is never signalled), so that none can exit and
// hand its children to init while the walk goes on, then kills them all and waits (at
// most sweepWait) for them to be gone. It walks again until a round finds none. A descendant whose parent exited before the sweep is
// no longer a descendant and is not found: that is what a PID namespace is for.
func sweep(root int) {
	for range sweepRounds {
		var found []int
		queue := []int{root}
		for len(queue) > 0 {
			parent := queue[0]
			queue = queue[1:]
			for _, pid := range children(parent) {
				fd, ok := openChild(parent, pid)
				if !ok {
					continue
				}
				unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0)
				found = append(found, fd)
				queue = append(queue, pid)
			}
		}
		for _, fd := range found {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		awaitPidfds(found, time.Now().Add(sweepWait))
		for _, fd := range found {
			unix.Close(fd)
		}
		if len(found) == 0 {
			return
		}
	}
}

// sweepWait bounds how long sweep waits for the processes it killed to be gone.
const sweepWait = time.Second

// awaitPidfds waits until every process of fds has exited (its pidfd reads ready), or
// until deadline.
func awaitPidfds(fds []int, deadline time.Time) {
	polls := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		polls[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	for len(polls) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		if _, err := unix.Poll(polls, int(left.Milliseconds())+1); err != nil && err != unix.EINTR {
			return
		}
		polls = slices.DeleteFunc(polls, func(p unix.PollFd) bool { return p.Revents != 0 })
	}
}

// children lists the children of pid, from every one of its threads.
func children(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var pids []int
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, field := range bytes.Fields(data) {
			if n, err := strconv.Atoi(string(field)); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// openChild opens a pidfd of pid and checks, after opening it, that the process is
// alive and still the child of parent: then the pidfd is that child's, not a later
// holder of a reused pid.
func openChild(parent, pid int) (int, bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, false
	}
	ppid, state, ok := readStat(pid)
	if !ok || ppid != parent || state == 'Z' || state == 'X' {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}

// readStat reads the parent pid and state of pid from /proc/<pid>/stat.
func readStat(pid int) (ppid int, state byte, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses, so read after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	return ppid, fields[0][0], err == nil
}
