package worker

import (
	"os"
	"runtime"
	"strconv"
)

// HostProcs is the GOMAXPROCS for a process that hosts workers: GOMAXPROCS from the
// environment when that is set, else one fewer than the CPUs the process may use, and at
// least one. A worker running a cell needs a CPU of its own, and a Go scheduler free to
// run on every CPU wakes a second thread, on the worker's CPU, at each hand-over between
// goroutines (a completion to its caller, a request to its service). On kiln's 2-CPU
// test machine one thread instead of two cut the median host-request round trip by about
// 15% and steadied the cell round trip (docs/host.md, "CPUs").
func HostProcs() int {
	if n, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && n > 0 {
		return n
	}
	return max(1, runtime.NumCPU()-1)
}
