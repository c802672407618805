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
	return statCPU("/proc/" + strconv.Itoa(pid) + "/stat")
}

// ThreadCPU is the user and system time each live thread of process pid has used, by
// thread id. A thread that ends while they are read is left out.
func ThreadCPU(pid int) (map[int]time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("proc: %w", err)
	}
	cpus := make(map[int]time.Duration, len(names))
	for _, name := range names {
		tid, err := strconv.Atoi(name.Name())
		if err != nil {
			continue
		}
		if d, err := statCPU(dir + "/" + name.Name() + "/stat"); err == nil {
			cpus[tid] = d
		}
	}
	return cpus, nil
}

// statCPU reads utime and stime from a stat file of /proc.
func statCPU(path string) (time.Duration, error) {
	stat, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("proc: %w", err)
	}
	// The command name, in parentheses, may hold spaces: fields are counted after it.
	end := bytes.LastIndexByte(stat, ')')
	fields := bytes.Fields(stat[end+1:])
	if end < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("proc: %s: unexpected %q", path, stat)
	}
	utime, err1 := strconv.ParseInt(string(fields[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc: %s: unexpected %q", path, stat)
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
