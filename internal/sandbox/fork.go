package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/kilnrt/kiln/internal/proc"
)

// A Forker starts a child from a process that has its program loaded already (a
// zygote), by forking it, instead of executing the program: see Host.Fork.
type Forker interface {
	// Fork asks for one child in new namespaces (flags, CLONE_NEW*), with files as its
	// fds 0, 1, 2, …, its environment, working directory and program's arguments as
	// c says, confined as spec (JSON) says. files are the child's stdin, stdout and
	// stderr, c's ExtraFiles, then its report descriptor and those spec names. It returns once the request is answered.
	// The child is this process's (CLONE_PARENT): it writes "pid N" on its report
	// descriptor first, then what the helper writes. The pid returned is the child's, as
	// the forker was told it, or 0.
	Fork(ctx context.Context, flags uintptr, spec []byte, c proc.Command, files []*os.File) (int, error)
}

// How a worker's process started (Applied.Start).
const (
	StartSpawned = "spawned" // python executed, confined by kiln's helper first
	StartForked  = "forked"  // forked from a zygote, confined by itself
)

// ErrNoFork is a child that Fork cannot start so: the caller starts it with Start.
var ErrNoFork = errors.New("sandbox: cannot fork the child")

// forkTimeout bounds the wait for a forked child's first report line.
const forkTimeout = 10 * time.Second

// forkSpec is what a forked child applies to itself (python/kiln/confine.py): the
// helper's spec, with what the host made for it because the child executes nothing.
type forkSpec struct {
	spec
	// Confine: apply the spec; false for a profile that confines nothing.
	Confine bool `json:"confine,omitempty"`
	// Ruleset is the fd of the Landlock ruleset the host made of the spec, without the
	// rules of the paths the child's view mounts anew: those are LandlockRules, which
	// the child adds to it. LandlockFlags are what to restrict with.
	Ruleset       int         `json:"ruleset,omitempty"`
	LandlockRules []freshRule `json:"landlock_rules,omitempty"`
	LandlockFlags uint32      `json:"landlock_flags,omitempty"`
	Scoped        bool        `json:"scoped,omitempty"`
	Program       string      `json:"seccomp_program,omitempty"` // the seccomp filter, assembled, in hex
}

// freshRule is a Landlock rule the child makes: access beneath paths.
type freshRule struct {
	Access uint64   `json:"access"`
	Paths  []string `json:"paths"`
}

// isFresh reports whether path is mounted anew in a child's view: its /proc.
func isFresh(path string) bool { return path == "/proc" }

// freshRules are the rules of the paths a child's view mounts anew, as landlockRuleset
// makes them with fresh.
func freshRules(s spec) []freshRule {
	a := accessOf(s)
	var kernel []string
	for _, d := range kernelDirs {
		if isFresh(d) {
			kernel = append(kernel, d)
		}
	}
	effective := func(access uint64) uint64 {
		if s.Landlock >= 2 && access&ll.AccessFSMakeReg != 0 {
			access |= ll.AccessFSRefer
		}
		return access & uint64(a.cfg.HandledAccessFS)
	}
	return []freshRule{
		{Access: effective(uint64(a.read)), Paths: kernel},
		{Access: effective(uint64(a.write)), Paths: privateDirs[:]},
	}
}

// seccompProgram is the filter loadSeccomp loads, assembled (struct sock_filter each 8
// bytes).
func seccompProgram() ([]byte, error) {
	raw, err := seccompFilter()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		b = binary.NativeEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b, nil
}

// Fork is Start for a child f forks, rather than one executed: the child is init of new
// user and PID namespaces, confined by pol as Start's would be, and Fork returns it with
// what applied. It is ErrNoFork where this kernel's mechanisms make a Start that forking
// cannot match (no namespaces), and when /proc names another PID namespace than this
// process's.
func (h *Host) Fork(ctx context.Context, pol Policy, c proc.Command, f Forker) (*proc.Process, Applied, error) {
	fs := forkSpec{}
	var pl plan
	var group *cgroup
	done := false
	defer func() {
		if !done && group != nil {
			group.remove()
		}
	}()
	var closing []*os.File
	defer func() {
		for _, f := range closing {
			f.Close()
		}
	}()
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID)
	extra := slices.Clip(c.ExtraFiles)
	if pol.Profile.Confines() {
		if h == nil {
			return nil, Applied{}, fmt.Errorf("%w: %s", ErrNoHost, pol.Profile)
		}
		h.settleNamespaces(ctx)
		if !h.mechanisms().Namespaces {
			return nil, Applied{}, fmt.Errorf("%w: no namespaces of its own", ErrNoFork)
		}
		var err error
		if pl, err = h.plan(pol); err != nil {
			return nil, Applied{}, err
		}
		if pl.limits {
			if group, err = h.cgroups.make(pol.MemoryBytes, pl.spec.Processes); err != nil {
				return nil, Applied{}, fmt.Errorf("sandbox: cgroup: %w", err)
			}
			pl.spec.Cgroups = group.procs()
		}
		flags |= pl.namespaces
		fs.spec, fs.Confine = pl.spec, true
		fs.Cwd = pol.Cwd
		if fs.Cwd == "" && strings.HasPrefix(c.Dir, "/") && !strings.HasPrefix(c.Dir, "/proc/") {
			fs.Cwd = c.Dir
		}
		if fs.Seccomp {
			prog, err := seccompProgram()
			if err != nil {
				return nil, Applied{}, fmt.Errorf("sandbox: seccomp: %w", err)
			}
			fs.Program = hex.EncodeToString(prog)
		}
	}
	reportR, reportW, err := os.Pipe()
	if err != nil {
		return nil, Applied{}, fmt.Errorf("sandbox: report pipe: %w", err)
	}
	defer reportR.Close()
	closing = append(closing, reportW)
	fs.Report = 3 + len(extra)
	extra = append(extra, reportW)
	if fs.Landlock > 0 {
		fd, lflags, scoped, err := landlockRuleset(fs.spec, false)
		if err != nil {
			return nil, Applied{}, fmt.Errorf("%w: landlock: %w", ErrUnavailable, err)
		}
		ruleset := os.NewFile(uintptr(fd), "landlock ruleset")
		closing = append(closing, ruleset)
		fs.Ruleset, fs.LandlockFlags, fs.Scoped = 3+len(extra), lflags, scoped
		fs.LandlockRules = freshRules(fs.spec)
		extra = append(extra, ruleset)
	}
	raw, err := json.Marshal(fs)
	if err != nil {
		return nil, Applied{}, fmt.Errorf("sandbox: %w", err)
	}
	hc := c
	hc.ExtraFiles = extra
	handoff, err := proc.NewHandoff(hc)
	if err != nil {
		return nil, Applied{}, err
	}
	defer handoff.Close()
	answered, forkErr := f.Fork(ctx, flags, raw, c, handoff.Files())
	for _, f := range closing {
		f.Close()
	}
	closing = nil
	pid, err := readPid(ctx, reportR)
	if err != nil {
		if forkErr != nil {
			err = forkErr
		}
		if answered > 1 {
			// A child that did not report in time is still this process's: end and reap
			// it, or it dies at its next report and stays a zombie.
			if p, aerr := handoff.Adopt(answered, true); aerr == nil {
				discard(p)
			}
		}
		return nil, Applied{}, fmt.Errorf("%w: %w", ErrNoFork, err)
	}
	p, err := handoff.Adopt(pid, true)
	if err != nil {
		return nil, Applied{}, err
	}
	applied, err := awaitReport(ctx, p, reportR)
	if err == nil && forkErr != nil {
		err = fmt.Errorf("%w: %w", ErrNoFork, forkErr)
	}
	if err == nil && pol.Profile.Confines() {
		applied, err = h.settle(p, pol, pl, group, applied)
	} else if err == nil {
		applied = unconfined(p.Namespaced())
	}
	if err != nil {
		discard(p)
		return nil, Applied{}, err
	}
	done = true
	return p, applied, nil
}

// maxPidLine bounds the report's first line, "pid N".
const maxPidLine = 32

// readPid reads the forked child's first report line, "pid N": a byte at a time, so
// that what follows stays in r for awaitReport. The end of r first is no child.
func readPid(ctx context.Context, r *os.File) (int, error) {
	deadline := time.Now().Add(forkTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	r.SetReadDeadline(deadline)
	defer r.SetReadDeadline(time.Time{})
	var line []byte
	b := make([]byte, 1)
	for len(line) < maxPidLine {
		if _, err := r.Read(b); err != nil {
			return 0, fmt.Errorf("no child reported: %w", err)
		}
		if b[0] == '\n' {
			text, ok := strings.CutPrefix(string(line), "pid ")
			pid, err := strconv.Atoi(text)
			if !ok || err != nil || pid <= 1 {
				return 0, fmt.Errorf("the child's first report line %q", line)
			}
			return pid, nil
		}
		line = append(line, b[0])
	}
	return 0, fmt.Errorf("the child's first report line %q… is too long", line)
}
