// Package scratch makes a host's private directories in the temporary directory, named
// for the host's pid, and removes those of hosts that have died: a host killed outright
// never removes its own. Pids are /proc's (see procfs), so that a host started in another
// host's PID namespace judges the directories they share as the others do.
package scratch

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kilnrt/kiln/internal/procfs"
)

// Kind is what a directory is for.
type Kind string

// The directories a host makes: a worker generation's, the private copy of a release a
// hooks generation loads, and a program run's.
const (
	Worker  Kind = "worker"
	Release Kind = "release"
	Program Kind = "program"
)

// prefix begins the name of a directory of kind: the host's pid and a dash follow it,
// then what os.MkdirTemp adds.
func prefix(kind Kind) string { return "kiln-" + string(kind) + "-p" }

// Make makes a new private directory of kind in the temporary directory, named for this
// host.
func Make(kind Kind) (string, error) {
	return os.MkdirTemp("", prefix(kind)+strconv.Itoa(procfs.Self())+"-")
}

// SweepStale removes the directories in the temporary directory whose host has died, and
// returns how many it removed. A directory whose host lives, or whose name it cannot
// read, is left alone: a pid reused by another process keeps a stale directory, never
// loses a live one.
func SweepStale(log *slog.Logger) int {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		log.Warn("sweeping stale kiln directories", "err", err)
		return 0
	}
	removed := 0
	for _, e := range entries {
		pid, ok := Owner(e.Name())
		if !ok || !e.IsDir() || procfs.Alive(pid) {
			continue
		}
		if err := RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
			log.Warn("removing a stale kiln directory", "dir", e.Name(), "err", err)
			continue
		}
		removed++
	}
	return removed
}

// Owner is the pid of the host named in a directory's name.
func Owner(name string) (int, bool) {
	for _, kind := range [...]Kind{Worker, Release, Program} {
		rest, ok := strings.CutPrefix(name, prefix(kind))
		if !ok {
			continue
		}
		digits, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(digits)
		return pid, ok && err == nil && pid > 0 && strconv.Itoa(pid) == digits
	}
	return 0, false
}

// RemoveAll removes dir, directories under it that are not writable (a release's copy,
// or one a program made so) included: when a plain removal fails, it makes each
// directory writable and tries again.
func RemoveAll(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
