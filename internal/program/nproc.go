package program

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kilnrt/kiln/internal/proc"
)

// limitProcesses sets the RLIMIT_NPROC of child, soft and hard, to the tasks
// (processes and threads) its user has now plus more. The kernel counts the limit
// against all the user's tasks, so an absolute number would be too few for a user
// with many, and too many for one with few. A child already reaped is left alone: its
// pid may name another process by now.
func limitProcesses(child *proc.Process, more int) error {
	n := uint64(userTasks(os.Getuid()) + more)
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

// userTasks counts the tasks of user uid, from /proc.
func userTasks(uid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.Itoa(uid)
	n := 0
	for _, e := range entries {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real string
		threads := 0
		for line := range strings.Lines(string(status)) {
			key, value, _ := strings.Cut(line, ":")
			switch key {
			case "Uid":
				real, _, _ = strings.Cut(strings.TrimSpace(value), "\t")
			case "Threads":
				threads, _ = strconv.Atoi(strings.TrimSpace(value))
			}
		}
		if real == want {
			n += threads
		}
	}
	return n
}
