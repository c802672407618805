// Package bombtest is the cell code of the tests that check a session's limits: a
// memory bomb, a busy loop and a fork bomb, each of which runs until a limit stops it.
package bombtest

import "fmt"

// Memory allocates until the address space or the cgroup runs out: MemoryError.
const Memory = "data = []\nwhile True:\n    data.append(bytearray(10**6))"

// Busy spins until its CPU time runs out: CPULimitExceeded.
const Busy = "while True:\n    pass"

// Sleep waits an hour: only the cell's wall clock stops it.
const Sleep = "import time\ntime.sleep(3600)"

// Fork forks up to n children, each of which waits to be killed, until a fork is
// refused; the children are killed and reaped either way, and the refusal (a
// BlockingIOError) ends the cell. A cell that forks all n ends ok, printing n.
func Fork(n int) string {
	return fmt.Sprintf(`import os, signal
kids = []
try:
    for _ in range(%d):
        pid = os.fork()
        if pid == 0:
            while True:
                signal.pause()
        kids.append(pid)
finally:
    for k in kids:
        os.kill(k, signal.SIGKILL)
        os.waitpid(k, 0)
print(len(kids))`, n)
}
