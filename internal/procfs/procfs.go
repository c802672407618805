// Package procfs judges processes as the /proc mounted here names them. A kiln started
// inside another's PID namespace (from a cell) has a pid of its own there, while the
// /proc it reads, the temporary directory and the record it shares are the host's: pids
// written down for others to judge are /proc's, and judged through /proc.
package procfs

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// Self is this process's pid in the PID namespace of the /proc mounted here: the pid
// under which /proc, and every process reading it, finds this one. It is os.Getpid when
// /proc does not say.
func Self() int {
	if link, err := os.Readlink("/proc/self"); err == nil {
		if pid, err := strconv.Atoi(link); err == nil && pid > 0 {
			return pid
		}
	}
	return os.Getpid()
}

// NamesSelf reports whether the /proc mounted here names this process by the pid it has
// in its own PID namespace: false in a process started inside another's PID namespace
// (a kiln started from a cell), where /proc/<pid> of a child it starts names another
// process, or none.
func NamesSelf() bool { return Self() == os.Getpid() }

// Alive reports whether process pid, as /proc names it, exists and has not exited: a
// zombie, exited and not yet reaped, is not alive. Without /proc, kill(pid, 0) judges,
// in this process's PID namespace.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		state, ok := State(stat)
		return !ok || (state != 'Z' && state != 'X' && state != 'x')
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		return false // /proc is there, and names no such process
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// State is the state field (the third) of a /proc/<pid>/stat line: 'R', 'S', 'Z'… The
// second field, the command's name in parentheses, may hold spaces and parentheses
// itself, so the fields are counted from the last ')'.
func State(stat []byte) (byte, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	fields := bytes.Fields(stat[i+1:])
	if len(fields) == 0 || len(fields[0]) != 1 {
		return 0, false
	}
	return fields[0][0], true
}
