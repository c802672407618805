package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
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
	mech    Mechanisms
	cgroups *cgroups // nil when kiln cannot make cgroups
	log     *slog.Logger
}

// Probe probes the kernel: Landlock's ABI, seccomp, whether cgroups can be made, and,
// by starting one child, whether namespaces can be made and a tmpfs and /proc mounted
// in them.
func Probe(ctx context.Context, log *slog.Logger) *Host {
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
	h.probeNamespaces(ctx)
	log.Debug("sandbox mechanisms", "landlock", h.mech.Landlock, "seccomp", h.mech.Seccomp,
		"namespaces", h.mech.Namespaces, "cgroup", h.mech.Cgroup)
	return h
}

// Mechanisms returns what the kernel offers.
func (h *Host) Mechanisms() Mechanisms { return h.mech }

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
