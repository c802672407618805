package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kilnrt/kiln/internal/proc"
)

// DefaultMaxProcesses is the number of tasks (processes and threads) a confined child
// and everything it starts may have at once, when its Policy gives none: a fork bomb
// stops there.
const DefaultMaxProcesses = 512

// maxReport bounds what the helper may write on its report pipe.
const maxReport = 64 << 10

// Policy is how one child is confined.
type Policy struct {
	Profile Profile
	Network Network
	// Work is the child's working directory, readable and writable.
	Work string
	// Private are directories of this child's alone (its scratch directory),
	// readable and writable.
	Private []string
	// Read are more directories the child may read (and execute from, but under
	// ProfileStrict).
	Read []string
	// Hide are directories made unreachable by the child, even through a Unix socket
	// in them: the data directory, say. The home directory is always hidden.
	Hide []string
	// Python is the interpreter the child runs: its prefix (and a virtual
	// environment's base) is readable and executable.
	Python string
	// MemoryBytes, when positive, is the memory the child and everything it starts
	// may use (a cgroup's limit; where there is none, the address space of each).
	MemoryBytes int64
	// MaxProcesses is the number of tasks the child and everything it starts may have
	// at once; zero means DefaultMaxProcesses.
	MaxProcesses int
	// Cwd is the path of the child's working directory, where the command gives it by
	// descriptor (/proc/self/fd/N): the child enters it again once its view is
	// mounted, if it is the same directory. Empty means the command's Dir.
	Cwd string
}

// Applied is what confined a child, as its helper reported it.
type Applied struct {
	Profile    string   `json:"profile"`
	Namespaces []string `json:"namespaces,omitempty"`   // user, pid, mount, ipc, net
	Landlock   int      `json:"landlock_abi,omitzero"`  // the ABI of the Landlock domain
	Scoped     bool     `json:"scoped,omitzero"`        // signals and abstract sockets scoped
	Seccomp    bool     `json:"seccomp,omitzero"`       // the seccomp filter
	Network    string   `json:"network,omitempty"`      // host, none, or the allowed ports
	Cgroup     string   `json:"cgroup,omitempty"`       // v1 or v2: memory and pids limits
	Processes  int      `json:"max_processes,omitzero"` // the pids limit
	Memory     int64    `json:"memory_bytes,omitzero"`  // the memory limit
	Missing    []string `json:"missing,omitempty"`      // what a best-effort profile left out
	// Start is how a worker's process started, StartSpawned or StartForked, and
	// NotForked why one spawned was not forked, where a zygote was asked first.
	Start     string `json:"start,omitempty"`
	NotForked string `json:"not_forked,omitempty"`

	group *cgroup // the child's cgroup, for OOMKills; nil without one
}

// OOMKills is how many processes of the child's cgroup the kernel has killed so far
// for want of memory: the child itself or anything it started, where the cgroup's
// memory ran out before an address space did. Zero without a cgroup memory limit. It
// is read from the cgroup, or once the child has ended, the count the cgroup had then.
func (a Applied) OOMKills() int64 { return a.group.oomKills() }

// Pids returns the processes in the child's cgroup (the child and all it started, as
// none can leave it), and true; false without a cgroup or when it cannot be read. Once
// the cgroup is removed, as when the child has exited, there are none.
func (a Applied) Pids() ([]int, bool) { return a.group.pids() }

// ErrNoHost is a confining profile given without a probed Host.
var ErrNoHost = errors.New("sandbox: a confining profile without a probed host")

// Start starts c confined by pol, and returns it with what applied. With
// ProfileNone (or none given) it is proc.Start, and h may be nil. The child runs the
// helper first, which confines itself and then executes c; Start returns once it has,
// or with an error naming the part of the confinement that failed.
func (h *Host) Start(ctx context.Context, pol Policy, c proc.Command) (*proc.Process, Applied, error) {
	if !pol.Profile.Confines() {
		p, err := proc.Start(c)
		if err != nil {
			return p, unconfined(false), err
		}
		return p, unconfined(p.Namespaced()), nil
	}
	if h == nil {
		return nil, Applied{}, fmt.Errorf("%w: %s", ErrNoHost, pol.Profile)
	}
	unsure := h.unsure()
	p, applied, s, err := h.start(ctx, pol, c)
	if unsure && h.learn(s, applied, err) {
		// The kernel refused the namespaces this start took as given: start again as
		// the probe would have had it.
		if p != nil {
			discard(p)
		}
		if pol.Profile.Default {
			pol.Profile.BestEffort = true
		}
		if p, applied, _, err = h.start(ctx, pol, c); err == nil && pol.Profile.Default && len(applied.Missing) > 0 {
			h.log.Warn(DefaultLacks, "missing", strings.Join(applied.Missing, "; "))
		}
	}
	if errors.Is(err, proc.ErrNamespaces) {
		err = fmt.Errorf("%w: %s needs user, mount and PID namespaces: %w", ErrUnavailable, pol.Profile.Name, err)
	}
	return p, applied, err
}

// unconfined is what applies to a child under ProfileNone: the host's network, and
// the user and PID namespaces it is init of, if it is.
func unconfined(namespaced bool) Applied {
	a := Applied{Profile: ProfileNone, Network: NetworkHost}
	if namespaced {
		a.Namespaces = []string{"user", "pid"}
	}
	return a
}

// start is one Start of c confined by pol, which also returns the helper's spec.
func (h *Host) start(ctx context.Context, pol Policy, c proc.Command) (*proc.Process, Applied, spec, error) {
	plan, err := h.plan(pol)
	if err != nil {
		return nil, Applied{}, spec{}, err
	}
	var group *cgroup
	if plan.limits {
		if group, err = h.cgroups.make(pol.MemoryBytes, plan.spec.Processes); err != nil {
			return nil, Applied{}, plan.spec, fmt.Errorf("sandbox: cgroup: %w", err)
		}
		plan.spec.Cgroups = group.procs()
	}
	done := false
	defer func() {
		if !done && group != nil {
			group.remove()
		}
	}()
	plan.spec.Cwd = pol.Cwd
	if plan.spec.Cwd == "" && filepath.IsAbs(c.Dir) && !strings.HasPrefix(c.Dir, "/proc/") {
		plan.spec.Cwd = c.Dir
	}
	p, applied, err := runHelper(ctx, plan.spec, c, func(wrapped *proc.Command) {
		wrapped.Contain = plan.namespaces != 0
		wrapped.MustContain = plan.namespaces != 0 && !pol.Profile.BestEffort
		wrapped.Namespaces = plan.namespaces
		if os.Getuid() != 0 {
			// Not root in its user namespace, the helper keeps what mounting its view needs.
			wrapped.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
		}
	})
	if err != nil {
		return nil, Applied{}, plan.spec, err
	}
	if applied, err = h.settle(p, pol, plan, group, applied); err != nil {
		discard(p)
		return nil, Applied{}, plan.spec, err
	}
	done = true
	return p, applied, plan.spec, nil
}

// LimitsProcesses reports whether a child that h starts under pol gets a cgroup that
// limits its processes and threads (pids.max) to pol's MaxProcesses. h may be nil.
func (h *Host) LimitsProcesses(pol Policy) bool {
	return h != nil && pol.Profile.Confines() && h.cgroups != nil
}

// settle completes what the child reported with what the host applied, and removes
// the child's cgroup once it exits. A profile that is not best effort and lacks a part
// is an error.
func (h *Host) settle(p *proc.Process, pol Policy, plan plan, group *cgroup, applied Applied) (Applied, error) {
	applied.Network = plan.network
	applied.Missing = append(plan.missing, applied.Missing...)
	applied.Profile = pol.Profile.String()
	if !pol.Profile.BestEffort && len(applied.Missing) > 0 {
		return Applied{}, fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(applied.Missing, "; "))
	}
	if group != nil {
		applied.Cgroup = h.cgroups.version
		applied.Processes = plan.spec.Processes
		applied.Memory = pol.MemoryBytes
		applied.group = group
		go func() {
			<-p.Exited()
			group.remove()
		}()
	}
	return applied, nil
}

// StartLimited starts c confined by nothing but a limit of memory bytes on the address
// space of it and of each process it starts (RLIMIT_AS, which the helper sets before it
// executes c): how kiln bounds the memory of a command under a profile that confines
// nothing, and so makes no cgroup. c keeps its capabilities and may gain privileges.
func StartLimited(ctx context.Context, memory int64, c proc.Command) (*proc.Process, error) {
	if memory <= 0 {
		return proc.Start(c)
	}
	p, _, err := runHelper(ctx, spec{Bare: true, Rlimits: true, Memory: memory}, c, nil)
	return p, err
}

// runHelper starts c through the helper, which applies s to itself and then executes
// c; set, when not nil, adjusts the helper's command. It returns once the helper has
// executed c, with what the helper applied, or with why it could not.
func runHelper(ctx context.Context, s spec, c proc.Command, set func(*proc.Command)) (*proc.Process, Applied, error) {
	path, err := exec.LookPath(c.Path)
	if err != nil {
		return nil, Applied{}, fmt.Errorf("%w: %w", proc.ErrNotStarted, err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, Applied{}, fmt.Errorf("sandbox: the helper: %w", err)
	}
	reportR, reportW, err := os.Pipe()
	if err != nil {
		return nil, Applied{}, fmt.Errorf("sandbox: report pipe: %w", err)
	}
	defer reportR.Close()
	s.Report = 3 + len(c.ExtraFiles)
	s.Path = path
	raw, err := json.Marshal(s)
	if err != nil {
		reportW.Close()
		return nil, Applied{}, fmt.Errorf("sandbox: %w", err)
	}
	wrapped := c
	wrapped.Path = self
	wrapped.Name = helperName
	wrapped.Args = append([]string{string(raw), c.Path}, c.Args...)
	wrapped.ExtraFiles = append(slices.Clip(c.ExtraFiles), reportW)
	if set != nil {
		set(&wrapped)
	}
	p, err := proc.Start(wrapped)
	reportW.Close()
	if err != nil {
		return nil, Applied{}, err
	}
	applied, err := awaitReport(ctx, p, reportR)
	if err != nil {
		discard(p)
		return nil, Applied{}, err
	}
	return p, applied, nil
}

// errNamespacesRefused is what a best-effort child started without namespaces misses.
const errNamespacesRefused = "refused by the kernel; the data directory's socket stays reachable"

// awaitReport reads the helper's report: a line "ok {applied}" once it has confined
// itself, then, if executing the program failed, a line "error …". The pipe ends when
// the program is executing or the helper has died.
func awaitReport(ctx context.Context, p *proc.Process, r *os.File) (Applied, error) {
	type result struct {
		lines []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		sc := bufio.NewScanner(io.LimitReader(r, maxReport))
		sc.Buffer(make([]byte, 0, 4096), maxReport)
		for sc.Scan() {
			res.lines = append(res.lines, sc.Text())
		}
		res.err = sc.Err()
		done <- res
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		r.Close() // ends the reader
		<-done
		return Applied{}, ctx.Err()
	}
	if res.err != nil {
		return Applied{}, fmt.Errorf("sandbox: reading the helper's report: %w", res.err)
	}
	if len(res.lines) == 0 {
		<-p.Exited()
		return Applied{}, fmt.Errorf("sandbox: the helper ended before it confined the child (%s)", p.Describe())
	}
	last := res.lines[len(res.lines)-1]
	if msg, ok := strings.CutPrefix(last, "error "); ok {
		if v, ok := strings.CutPrefix(msg, reportView); ok {
			return Applied{}, &viewError{msg: v}
		}
		if v, ok := strings.CutPrefix(msg, reportProc); ok {
			return Applied{}, &viewError{proc: true, msg: v}
		}
		if strings.HasPrefix(msg, "exec ") {
			return Applied{}, fmt.Errorf("%w: %s", proc.ErrNotStarted, msg)
		}
		return Applied{}, fmt.Errorf("%w: %s", ErrUnavailable, msg)
	}
	msg, ok := strings.CutPrefix(last, "ok ")
	if !ok {
		return Applied{}, fmt.Errorf("sandbox: the helper's report %q", last)
	}
	var a Applied
	if err := json.Unmarshal([]byte(msg), &a); err != nil {
		return Applied{}, fmt.Errorf("sandbox: the helper's report: %w", err)
	}
	return a, nil
}

// Lacks returns what h cannot give pol: the pieces a best-effort start of pol's profile
// leaves out, none when h gives it in full. Namespaces that ProbeOnStart left to the
// first start are taken as given. An error is a policy no kernel gives.
func (h *Host) Lacks(pol Policy) ([]string, error) {
	if !pol.Profile.Confines() {
		return nil, nil
	}
	pol.Profile.BestEffort = true
	pl, err := h.plan(pol)
	return pl.missing, err
}

// plan is what a start asks of the helper, and what it knows before it asks.
type plan struct {
	spec       spec
	namespaces uintptr  // CLONE_NEW* beyond user and PID; 0: no namespaces
	limits     bool     // a cgroup is made
	network    string   // the network as applied
	missing    []string // what a best-effort profile leaves out
}

// plan checks pol against the mechanisms and makes the helper's spec.
func (h *Host) plan(pol Policy) (plan, error) {
	var pl plan
	strict := pol.Profile.Name == ProfileStrict
	network := pol.Network
	if network.Mode == "" {
		network.Mode = NetworkHost
	}
	if strict {
		if network.Mode == NetworkPorts {
			return plan{}, fmt.Errorf("%w: strict allows no network, not ports %s", ErrProfile, network)
		}
		network.Mode = NetworkNone
	}
	pl.network = network.String()
	lack := func(what string) error {
		if pol.Profile.BestEffort {
			pl.missing = append(pl.missing, what)
			return nil
		}
		return fmt.Errorf("%w: %s needs %s", ErrUnavailable, pol.Profile.Name, what)
	}
	m := h.mechanisms()
	s := &pl.spec
	if m.Namespaces {
		pl.namespaces = syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
		if network.Mode == NetworkNone {
			pl.namespaces |= syscall.CLONE_NEWNET
		}
		s.Mount = true
		s.Proc = m.ProcMount
		s.UserNS = userNamespace()
		if !m.ProcMount {
			if err := lack("a /proc of its own PID namespace (" + m.NamespacesErr + ")"); err != nil {
				return plan{}, err
			}
		}
	} else if err := lack("user, mount and PID namespaces (" + m.NamespacesErr + ")"); err != nil {
		return plan{}, err
	}
	if m.Landlock == 0 {
		if err := lack("Landlock"); err != nil {
			return plan{}, err
		}
	} else {
		s.Landlock = min(m.Landlock, maxLandlockABI)
	}
	if network.Mode == NetworkPorts && m.Landlock < landlockNetABI {
		if err := lack(fmt.Sprintf("Landlock ABI %d for TCP port rules (the kernel offers %d)", landlockNetABI, m.Landlock)); err != nil {
			return plan{}, err
		}
	}
	if network.Mode == NetworkNone && !m.Namespaces {
		if err := lack("a network namespace for no network"); err != nil {
			return plan{}, err
		}
	}
	if m.Landlock > 0 && m.Landlock < landlockScopedABI {
		if err := lack(fmt.Sprintf("Landlock ABI %d to scope signals and abstract sockets (the kernel offers %d)", landlockScopedABI, m.Landlock)); err != nil {
			return plan{}, err
		}
	}
	if m.Seccomp {
		s.Seccomp = true
	} else if err := lack("seccomp"); err != nil {
		return plan{}, err
	}
	s.Processes = pol.MaxProcesses
	if s.Processes <= 0 {
		s.Processes = DefaultMaxProcesses
	}
	if h.cgroups != nil {
		pl.limits = true
	} else {
		// Without a cgroup, rlimits: the address space of each process, and the tasks of
		// the user, which the kernel does not count for root.
		s.Rlimits = true
		s.Memory = pol.MemoryBytes
		if err := lack("cgroups for memory and process limits (" + m.CgroupErr + ")"); err != nil {
			return plan{}, err
		}
	}
	s.Ports = network.Ports
	s.NetworkMode = network.Mode
	s.Strict = strict
	s.Write = clean(append([]string{pol.Work}, pol.Private...))
	s.Read = clean(append(pythonDirs(pol.Python), pol.Read...))
	home, _ := os.UserHomeDir()
	s.Hide = clean(append([]string{home}, pol.Hide...))
	s.Keep = clean(append(append([]string{}, s.Write...), s.Read...))
	return pl, nil
}

// userNamespace is the inode of this process's user namespace: the helper's differs
// once it is in one of its own.
func userNamespace() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/user", &st); err != nil {
		return 0
	}
	return st.Ino
}

// clean returns the absolute, cleaned forms of dirs, without empty ones or repeats.
func clean(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// pythonDirs is the prefix of the interpreter at path, that of the interpreter its
// symbolic links lead to, and a virtual environment's base.
func pythonDirs(path string) []string {
	if path == "" {
		return nil
	}
	if lp, err := exec.LookPath(path); err == nil {
		path = lp
	}
	var dirs []string
	add := func(bin string) {
		prefix := filepath.Dir(filepath.Dir(bin))
		if prefix != "/" && prefix != "." {
			dirs = append(dirs, prefix)
		}
	}
	add(path)
	if real, err := filepath.EvalSymlinks(path); err == nil {
		add(real)
	}
	cfg, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(path)), "pyvenv.cfg"))
	if err == nil {
		for line := range strings.SplitSeq(string(cfg), "\n") {
			key, value, ok := strings.Cut(line, "=")
			if ok && strings.TrimSpace(key) == "home" {
				add(filepath.Join(strings.TrimSpace(value), "python"))
			}
		}
	}
	return dirs
}

// discard kills p, a child whose start failed after it began, waits for it, and
// releases what it holds.
func discard(p *proc.Process) {
	p.Kill()
	<-p.Exited()
	p.Release(0)
}
