package worker

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dirPrefix begins the name of a generation's directory in the temporary directory;
// the host's pid and a dash follow it, then what os.MkdirTemp adds.
const dirPrefix = "kiln-worker-p"

// makeDir makes a generation's private directory, named for the host that owns it.
func makeDir() (string, error) {
	return os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
}

// SweepStale removes the generation directories in the temporary directory whose host
// has died (a host killed outright never removes its own), and returns how many it
// removed. A directory whose host lives, or whose name it cannot read, is left alone:
// a pid reused by another process keeps a stale directory, never loses a live one.
func SweepStale(log *slog.Logger) int {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		log.Warn("sweeping stale worker directories", "err", err)
		return 0
	}
	removed := 0
	for _, e := range entries {
		pid, ok := dirOwner(e.Name())
		if !ok || !e.IsDir() || alive(pid) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
			log.Warn("removing a stale worker directory", "dir", e.Name(), "err", err)
			continue
		}
		removed++
	}
	return removed
}

// dirOwner is the pid of the host named in a generation directory's name.
func dirOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, dirPrefix)
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	return pid, ok && err == nil && pid > 0 && strconv.Itoa(pid) == digits
}

// alive reports whether a process pid exists (one this host may not signal included).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
