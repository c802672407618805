package sandbox

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The controllers a child's cgroup limits.
const (
	controllerMemory = "memory"
	controllerPids   = "pids"
)

// cgroupRemoveWait bounds how long removing a cgroup waits for the kernel to let go
// of the processes that were in it.
const cgroupRemoveWait = 2 * time.Second

// cgroups makes a cgroup for each confined child, under the cgroups this process is
// in: one directory in the unified hierarchy (v2), or one in each of the memory and
// pids hierarchies (v1).
type cgroups struct {
	version string            // "v2" or "v1"
	bases   map[string]string // controller (or "" for v2) → the directory children go under
	prefix  string            // the name of this host's cgroups: kiln-<pid>-<random>-
	seq     atomic.Int64
}

// findCgroups finds where this process may make cgroups with memory and pids limits,
// and tries it once.
func findCgroups() (*cgroups, error) {
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	// Hosts of one process (each workbench probes its own) and a process whose pid an
	// earlier one had, with cgroups not yet removed, each name theirs apart.
	cg := &cgroups{bases: map[string]string{}, prefix: "kiln-" + strconv.Itoa(os.Getpid()) + "-" + rand.Text()[:8] + "-"}
	if root, ok := mounts[""]; ok && hasControllers(filepath.Join(root, own[""])) {
		cg.version = "v2"
		base := filepath.Join(root, own[""])
		// A cgroup's controllers reach its children only when its subtree asks for them.
		if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
			return nil, fmt.Errorf("enabling memory and pids under %s: %w", base, err)
		}
		cg.bases[""] = base
	} else {
		cg.version = "v1"
		for _, c := range []string{controllerMemory, controllerPids} {
			root, ok := mounts[c]
			if !ok {
				return nil, fmt.Errorf("no cgroup hierarchy with the %s controller", c)
			}
			cg.bases[c] = filepath.Join(root, own[c])
		}
	}
	g, err := cg.make(0, 0)
	if err != nil {
		return nil, err
	}
	g.remove()
	return cg, nil
}

// hasControllers reports whether the v2 cgroup dir offers memory and pids.
func hasControllers(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data))
	has := func(c string) bool {
		for _, f := range fields {
			if f == c {
				return true
			}
		}
		return false
	}
	return has(controllerMemory) && has(controllerPids)
}

// ownCgroups reads /proc/self/cgroup: controller → path ("" for the unified hierarchy).
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	own := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own, sc.Err()
}

// cgroupMounts reads /proc/self/mountinfo: controller → mount point of its v1
// hierarchy, and "" → that of the unified hierarchy.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options… - fstype source superoptions
		before, after, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(before), strings.Fields(after)
		if len(fields) < 5 || len(tail) < 3 || fields[3] != "/" {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			if _, seen := mounts[""]; !seen {
				mounts[""] = fields[4]
			}
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if opt == controllerMemory || opt == controllerPids {
					if _, seen := mounts[opt]; !seen {
						mounts[opt] = fields[4]
					}
				}
			}
		}
	}
	return mounts, sc.Err()
}

// cgroup is one child's cgroup: a directory per hierarchy.
type cgroup struct {
	dirs []string
	// events is the file that counts the processes the kernel killed for want of
	// memory in the cgroup (a line "oom_kill N"): memory.events (v2) or
	// memory.oom_control (v1); empty without a memory limit.
	events string
	// kills is the count as the cgroup was removed; removed says it was.
	kills   atomic.Int64
	removed atomic.Bool
}

// oomKills is how many processes the kernel has killed in g for want of memory: read
// from the cgroup while it is there, the count it had when removed after.
func (g *cgroup) oomKills() int64 {
	if g == nil || g.events == "" {
		return 0
	}
	if g.removed.Load() {
		return g.kills.Load()
	}
	n, err := readOOMKills(g.events)
	if err != nil { // removed meanwhile: its count was kept first
		return g.kills.Load()
	}
	return n
}

// readOOMKills reads the "oom_kill N" line of a cgroup's memory events file.
func readOOMKills(file string) (int64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no oom_kill count", file)
}

// make makes a cgroup limited to memory bytes (none if 0) and processes tasks (none if
// 0). On failure nothing is left made.
func (cg *cgroups) make(memory int64, processes int) (_ *cgroup, err error) {
	name := cg.prefix + strconv.FormatInt(cg.seq.Add(1), 10)
	g := &cgroup{}
	defer func() {
		if err != nil {
			g.remove()
		}
	}()
	write := func(dir, file, value string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		return nil
	}
	mkdir := func(base string) (string, error) {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		g.dirs = append(g.dirs, dir)
		return dir, nil
	}
	if cg.version == "v2" {
		dir, err := mkdir(cg.bases[""])
		if err != nil {
			return nil, err
		}
		if memory > 0 {
			if err := write(dir, "memory.max", strconv.FormatInt(memory, 10)); err != nil {
				return nil, err
			}
			write(dir, "memory.swap.max", "0") // absent without swap accounting
			if err := write(dir, "memory.oom.group", "1"); err != nil {
				return nil, err
			}
			g.events = filepath.Join(dir, "memory.events")
		}
		if processes > 0 {
			if err := write(dir, "pids.max", strconv.Itoa(processes)); err != nil {
				return nil, err
			}
		}
		return g, nil
	}
	mem, err := mkdir(cg.bases[controllerMemory])
	if err != nil {
		return nil, err
	}
	if memory > 0 {
		if err := write(mem, "memory.limit_in_bytes", strconv.FormatInt(memory, 10)); err != nil {
			return nil, err
		}
		write(mem, "memory.memsw.limit_in_bytes", strconv.FormatInt(memory, 10)) // absent without swap accounting
		g.events = filepath.Join(mem, "memory.oom_control")
	}
	pids, err := mkdir(cg.bases[controllerPids])
	if err != nil {
		return nil, err
	}
	if processes > 0 {
		if err := write(pids, "pids.max", strconv.Itoa(processes)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// killAll sends SIGKILL to every process in the cgroup dir: what a child that is not
// its PID namespace's init left behind. Each is signalled through a pidfd opened and
// then checked to be in the cgroup still, so that a reused pid is never signalled.
func killAll(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	name := "/" + filepath.Base(dir) + "\n"
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if member, err := os.ReadFile("/proc/" + f + "/cgroup"); err == nil && strings.Contains(string(member), name) {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
}

// pids reads the processes in g, from its first directory (on v1 each holds the same);
// a directory removed holds none. False for no cgroup, or one that cannot be read.
func (g *cgroup) pids() ([]int, bool) {
	if g == nil || len(g.dirs) == 0 {
		return nil, false
	}
	data, err := os.ReadFile(filepath.Join(g.dirs[0], "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true
	}
	if err != nil {
		return nil, false
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, true
}

// procs is the cgroup.procs files a process writes "0" to, to join g.
func (g *cgroup) procs() []string {
	files := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		files[i] = filepath.Join(d, "cgroup.procs")
	}
	return files
}

// remove kills what is left in g, then removes its directories once the kernel has
// let go of its processes.
func (g *cgroup) remove() {
	if g.events != "" && !g.removed.Load() {
		n, _ := readOOMKills(g.events)
		g.kills.Store(n)
		g.removed.Store(true)
	}
	deadline := time.Now().Add(cgroupRemoveWait)
	for _, d := range g.dirs {
		for {
			killAll(d)
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond) // the kernel frees the cgroup's tasks on its own time
		}
	}
}
