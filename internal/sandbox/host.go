package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/kilnrt/kiln/internal/proc"
)

// maxLandlockABI is the highest Landlock ABI kiln asks for: 7, which adds audit flags
// to 6's scoping of signals and abstract Unix sockets.
const maxLandlockABI = 7

// Landlock ABIs that add what a profile uses.
const (
	landlockNetABI    = 4 // TCP bind and connect rules
	landlockScopedABI = 6 // signals and abstract Unix sockets scoped to the domain
)

// probeTimeout bounds the namespace probe's child.
const probeTimeout = 5 * time.Second

// Mechanisms is what the kernel offers kiln, as a Host probed it.
type Mechanisms struct {
	// Namespaces: a child can be started in new user, PID, mount, IPC and network
	// namespaces, mount a tmpfs there and a /proc of its own.
	Namespaces bool `json:"namespaces"`
	// NamespacesErr says why not, when Namespaces is false.
	NamespacesErr string `json:"namespaces_error,omitempty"`
	ProcMount     bool   `json:"proc_mount"`             // a /proc of the child's PID namespace
	Landlock      int    `json:"landlock_abi"`           // the Landlock ABI the kernel offers; 0 for none
	Seccomp       bool   `json:"seccomp"`                // seccomp filters
	Cgroup        string `json:"cgroup,omitempty"`       // "v2", "v1", or empty when kiln cannot make cgroups
	CgroupErr     string `json:"cgroup_error,omitempty"` // why not, when Cgroup is empty
}

// Host is the kernel's mechanisms, probed once, and the cgroups kiln makes under its
// own. Its methods are safe for concurrent use.
type Host struct {
	cgroups *cgroups // nil when kiln cannot make cgroups
	log     *slog.Logger

	mu   sync.Mutex
	mech Mechanisms
	// Where ProbeOnStart left the namespaces to a start, nsUnsure says they are not
	// known yet, and procUnsure that a /proc of a PID namespace is not.
	nsUnsure, procUnsure bool
}

// Probe probes the kernel: Landlock's ABI, seccomp, whether cgroups can be made, and,
// by starting one child, whether namespaces can be made and a tmpfs and /proc mounted
// in them.
func Probe(ctx context.Context, log *slog.Logger) *Host {
	h := probeWithoutChild(log)
	h.probeNamespaces(ctx)
	h.logMechanisms()
	return h
}

// ProbeOnStart is Probe without the child that probes the namespaces, for a process
// that starts few children: the first start that asks for namespaces probes them. It
// is made as though the kernel gave them; where the kernel refuses them (the clone, or
// a mount the probe would have tried in them), the start is made again as a probe that
// found so would have made it, and the host keeps what it learned. Fork and Mechanisms
// probe first, as Probe does.
func ProbeOnStart(log *slog.Logger) *Host {
	h := probeWithoutChild(log)
	h.mech.Namespaces, h.mech.ProcMount = true, true
	h.nsUnsure, h.procUnsure = true, true
	return h
}

// probeWithoutChild probes what needs no child: Landlock, seccomp and cgroups.
func probeWithoutChild(log *slog.Logger) *Host {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{log: log}
	if abi, err := ll.LandlockGetABIVersion(); err == nil {
		h.mech.Landlock = abi
	}
	h.mech.Seccomp = seccomp.Supported()
	var err error
	if h.cgroups, err = findCgroups(); err != nil {
		h.mech.CgroupErr = err.Error()
	} else {
		h.mech.Cgroup = h.cgroups.version
	}
	return h
}

// logMechanisms logs what the kernel offers.
func (h *Host) logMechanisms() {
	m := h.mechanisms()
	h.log.Debug("sandbox mechanisms", "landlock", m.Landlock, "seccomp", m.Seccomp,
		"namespaces", m.Namespaces, "cgroup", m.Cgroup)
}

// Mechanisms returns what the kernel offers, probing the namespaces first where
// ProbeOnStart left them unprobed.
func (h *Host) Mechanisms() Mechanisms {
	h.settleNamespaces(context.Background())
	return h.mechanisms()
}

// mechanisms is what h knows of the kernel so far: namespaces not yet probed are taken
// as given.
func (h *Host) mechanisms() Mechanisms {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mech
}

// unsure reports whether h has not yet learned whether the kernel gives namespaces, or
// a /proc of a PID namespace.
func (h *Host) unsure() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nsUnsure || h.procUnsure
}

// settleNamespaces probes the namespaces as Probe does, if h has not learned them yet.
func (h *Host) settleNamespaces(ctx context.Context) {
	if !h.unsure() {
		return
	}
	probed := &Host{}
	probed.probeNamespaces(ctx)
	h.mu.Lock()
	if h.nsUnsure || h.procUnsure {
		h.mech.Namespaces, h.mech.ProcMount, h.mech.NamespacesErr =
			probed.mech.Namespaces, probed.mech.ProcMount, probed.mech.NamespacesErr
		h.nsUnsure, h.procUnsure = false, false
	}
	h.mu.Unlock()
	h.logMechanisms()
}

// learn takes what a start made as though the kernel gave namespaces (s, with what
// applied and its error) says of them, and reports whether the kernel refused what s
// asked: the start is then to be made again, without it.
func (h *Host) learn(s spec, applied Applied, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	var refused *viewError
	switch {
	case errors.As(err, &refused) && refused.proc:
		h.mech.ProcMount, h.mech.NamespacesErr, h.procUnsure = false, refused.msg, false
		return true
	case errors.As(err, &refused) || errors.Is(err, proc.ErrNamespaces):
		h.mech.Namespaces, h.mech.ProcMount = false, false
		h.mech.NamespacesErr = strings.TrimPrefix(err.Error(), proc.ErrNamespaces.Error()+": ")
		if refused != nil {
			h.mech.NamespacesErr = refused.msg
		}
		h.nsUnsure, h.procUnsure = false, false
		return true
	case err == nil && s.Mount && len(applied.Namespaces) == 0:
		h.mech.Namespaces, h.mech.ProcMount, h.mech.NamespacesErr = false, false, "refused by the kernel"
		h.nsUnsure, h.procUnsure = false, false
		return true
	case err == nil && s.Mount:
		h.nsUnsure = false
		if s.Proc {
			h.procUnsure = false
		}
	}
	return false
}

// probeNamespaces starts the helper in every namespace a profile uses, where it mounts
// what a confined child's view needs and reports what it could.
func (h *Host) probeNamespaces(ctx context.Context) {
	self, err := os.Executable()
	if err != nil {
		h.mech.NamespacesErr = err.Error()
		return
	}
	var out bytes.Buffer
	p, err := proc.Start(proc.Command{
		Path: self, Name: helperName, Args: []string{probeArg},
		MustContain: true, Namespaces: syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
		Stdout: &out,
	})
	if err != nil {
		h.mech.NamespacesErr = err.Error()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	select {
	case <-p.Exited():
	case <-ctx.Done():
		p.Kill()
		<-p.Exited()
	}
	p.Release(time.Second)
	var r probeReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		h.mech.NamespacesErr = fmt.Sprintf("the probe ended without a report (%s)", p.Describe())
		return
	}
	h.mech.Namespaces = r.Mount
	h.mech.ProcMount = r.Proc
	h.mech.NamespacesErr = r.Err
}

// probeReport is what the probe's child writes on stdout.
type probeReport struct {
	Mount bool   `json:"mount"` // a tmpfs could be mounted
	Proc  bool   `json:"proc"`  // a /proc could be mounted
	Err   string `json:"err,omitempty"`
}
