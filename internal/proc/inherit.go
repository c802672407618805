package proc

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// CloseOnExecFrom makes every descriptor of this process from first on close-on-exec:
// a program executed then holds those it was given (stdin, stdout, stderr, a command's
// ExtraFiles, which the exec places anew), not those this process inherited from
// whatever started it. Go opens its own close-on-exec; inherited ones are not, and
// Landlock, which checks opens, does not stop their use.
func CloseOnExecFrom(first int) error {
	err := unix.CloseRange(uint(first), math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	entries, rerr := os.ReadDir("/proc/self/fd") // a kernel before 5.11
	if rerr != nil {
		return fmt.Errorf("closing inherited descriptors: %w; %w", err, rerr)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// KeepInherited makes, once, every descriptor this process inherited past stderr
// close-on-exec, so that no child it starts, under any profile, is given one: Start
// calls it before each child, as does what starts a session's MCP server commands.
// One close_range(2) call, the first time.
var KeepInherited = sync.OnceValue(func() error { return CloseOnExecFrom(3) })
