package program

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/kilnrt/kiln/internal/proc"
)

// limitProcesses sets the RLIMIT_NPROC of child, soft and hard, to tasks plus more.
// The kernel counts the limit against the user's tasks (processes and threads) in the
// child's user namespace: in one of the child's own, its tasks alone, so tasks is the
// child itself; else all the user's, so tasks is what the user had as the child
// started, since an absolute number would be too few for a user with many, and too many
// for one with few. A child already reaped is left alone: its pid may name another
// process by now.
func limitProcesses(child *proc.Process, tasks, more int) error {
	n := uint64(tasks + more)
	err := child.WhileUnreaped(func(pid int) error { return setProcessLimit(pid, n) })
	if err != nil && !errors.Is(err, proc.ErrReaped) {
		return err
	}
	return nil
}

// setProcessLimit sets the RLIMIT_NPROC of process pid to n, or to its hard limit if
// that is lower.
func setProcessLimit(pid int, n uint64) error {
	rl := unix.Rlimit{Cur: n, Max: n}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, nil, &old); err == nil && old.Max < n {
		rl = unix.Rlimit{Cur: old.Max, Max: old.Max} // never above what the host may give
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &rl, nil); err != nil {
		return fmt.Errorf("program: limiting the child's processes: %w", err)
	}
	return nil
}

// maxStatusBytes bounds what is read of one /proc/<pid>/status: the lines counted come
// in its first few hundred bytes, and the whole is about 1.5 KiB.
const maxStatusBytes = 16 << 10

// userTasks counts the tasks of user uid, from each process's /proc/<pid>/status: its
// real uid and its threads. Each is read with three system calls (open, read, close)
// into one buffer: a host runs a program once per process on the machine.
func userTasks(uid int) int {
	procDir, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	defer procDir.Close()
	names, err := procDir.Readdirnames(-1)
	if err != nil {
		return 0
	}
	dirfd := int(procDir.Fd())
	want := []byte(strconv.Itoa(uid))
	buf := make([]byte, maxStatusBytes)
	n := 0
	for _, name := range names {
		if c := name[0]; c < '0' || c > '9' {
			continue
		}
		fd, err := unix.Openat(dirfd, name+"/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		size := 0
		for size < len(buf) {
			m, err := unix.Read(fd, buf[size:])
			if m <= 0 || err != nil {
				break
			}
			size += m
		}
		unix.Close(fd)
		if real, threads := statusTasks(buf[:size]); bytes.Equal(real, want) {
			n += threads
		}
	}
	return n
}

// statusTasks reads, from the text of a /proc/<pid>/status, the real uid and the
// number of threads.
func statusTasks(status []byte) (real []byte, threads int) {
	for len(status) > 0 {
		line, rest, _ := bytes.Cut(status, []byte("\n"))
		status = rest
		key, value, _ := bytes.Cut(line, []byte(":"))
		switch string(key) {
		case "Uid":
			real, _, _ = bytes.Cut(bytes.TrimSpace(value), []byte("\t"))
		case "Threads":
			threads, _ = strconv.Atoi(string(bytes.TrimSpace(value)))
		}
	}
	return real, threads
}
