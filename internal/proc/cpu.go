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
	return statTimes("/proc/"+strconv.Itoa(pid)+"/stat", false)
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
		if d, err := statTimes(dir+"/"+name.Name()+"/stat", false); err == nil {
			cpus[tid] = d
		}
	}
	return cpus, nil
}

// statTimes reads utime and stime from a stat file of /proc, and with children also
// cutime and cstime: the time of the children the process has waited for.
func statTimes(path string, children bool) (time.Duration, error) {
	stat, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("proc: %w", err)
	}
	// The command name, in parentheses, may hold spaces: fields are counted after it.
	end := bytes.LastIndexByte(stat, ')')
	fields := bytes.Fields(stat[end+1:])
	last := 12
	if children {
		last = 14
	}
	if end < 0 || len(fields) <= last {
		return 0, fmt.Errorf("proc: %s: unexpected %q", path, stat)
	}
	var ticks int64
	for _, f := range fields[11 : last+1] {
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc: %s: unexpected %q", path, stat)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// CPU is the user and system time the child has used, all its threads, and where an
// init fronts its program (Command.Front) what the init has reaped and the program's
// so far: from its exit status once it has been reaped, else from /proc. It reports
// false when neither could be read.
func (p *Process) CPU() (time.Duration, bool) {
	if e, ok := p.Ended(); ok {
		return e.CPU, true
	}
	var d time.Duration
	var err error
	if p.front != nil && p.namespaced {
		d, err = p.frontedCPU()
	} else {
		d, err = ProcessCPU(p.Pid())
	}
	if e, ok := p.Ended(); ok {
		return e.CPU, true // reaped meanwhile: the pid may name another process now
	}
	return d, err == nil
}
