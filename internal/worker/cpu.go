package worker

import (
	"time"

	"github.com/kilnrt/kiln/internal/proc"
)

// cellCPU measures the CPU time of one cell as the worker charges it: what the process
// uses while the cell runs, less what the threads that were there before it (an earlier
// cell's, left running) use meanwhile.
type cellCPU struct {
	pid    int
	base   time.Duration       // the process's CPU time as the cell started
	others map[int]*threadSpan // the threads there before the cell, but the main one
}

// threadSpan is a thread's CPU time as the cell started and as last seen.
type threadSpan struct{ start, seen time.Duration }

// startCellCPU starts measuring the cell starting now in process pid; false when its
// CPU time cannot be read.
func startCellCPU(pid int) (*cellCPU, bool) {
	base, err := proc.ProcessCPU(pid)
	if err != nil {
		return nil, false
	}
	c := &cellCPU{pid: pid, base: base, others: map[int]*threadSpan{}}
	threads, _ := proc.ThreadCPU(pid)
	for tid, d := range threads {
		if tid != pid {
			c.others[tid] = &threadSpan{d, d}
		}
	}
	return c, true
}

// used is the cell's CPU time so far. A thread of before that ended meanwhile is taken
// off for what it had used when last seen.
func (c *cellCPU) used() time.Duration {
	now, err := proc.ProcessCPU(c.pid)
	if err != nil {
		return 0
	}
	threads, _ := proc.ThreadCPU(c.pid)
	used := now - c.base
	for tid, span := range c.others {
		if d, ok := threads[tid]; ok {
			span.seen = d
		}
		used -= span.seen - span.start
	}
	return max(used, 0)
}
