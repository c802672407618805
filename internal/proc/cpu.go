package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// ProcessCPU is the user and system time a live process has used, all its threads.
func ProcessCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("proc: %w", err)
	}
	// The command name, in parentheses, may hold spaces: fields are counted after it.
	end := bytes.LastIndexByte(stat, ')')
	fields := bytes.Fields(stat[end+1:])
	if end < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("proc: /proc/%d/stat: unexpected %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(string(fields[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc: /proc/%d/stat: unexpected %q", pid, stat)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// CPU is the user and system time the child has used, all its threads: from its exit
// status once it has been reaped, else from /proc. It reports false when neither could
// be read.
func (p *Process) CPU() (time.Duration, bool) {
	if st := p.State(); st != nil {
		return st.UserTime() + st.SystemTime(), true
	}
	d, err := ProcessCPU(p.Pid())
	if st := p.State(); st != nil {
		return st.UserTime() + st.SystemTime(), true // reaped meanwhile: the pid may name another process now
	}
	return d, err == nil
}
