package worker

import (
	"os"
	"runtime"
	"strconv"
)

// startProcs is GOMAXPROCS as the runtime set it when the process started: from the
// environment, or from the CPUs the process may use, within its container's CPU limit.
var startProcs = runtime.GOMAXPROCS(0)

// HostProcs is the GOMAXPROCS for a process that hosts workers: GOMAXPROCS from the
// environment when that is set, else one fewer than the runtime's own choice at start,
// and at least one. A worker running a cell needs a CPU of its own, and a Go scheduler
// free to run on every CPU wakes a second thread, on the worker's CPU, at each hand-over
// between goroutines (a completion to its caller, a request to its service). On kiln's
// 2-CPU test machine one thread instead of two cut the median host-request round trip
// by about 15% and steadied the cell round trip (docs/host.md, "CPUs").
func HostProcs() int {
	if n, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && n > 0 { // as the runtime reads it
		return startProcs
	}
	return max(1, startProcs-1)
}
