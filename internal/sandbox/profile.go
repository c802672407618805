// Package sandbox confines the Python processes kiln starts — workbench workers,
// program children and workspace commands — with what Linux gives an ordinary
// process: user, mount, PID, IPC and network namespaces, Landlock, a seccomp filter and
// cgroups.
//
// A profile names what a child may reach (ProfileWorkspace, ProfileStrict,
// ProfileNone). A Host probes the kernel once for the mechanisms it offers; Host.Start
// starts a child under a Policy through a helper: kiln's own executable, re-executed
// under a hidden name, which applies the confinement to itself and then executes the
// child's program, and reports what applied before it does. A profile the kernel
// cannot give fails the start with an error naming the missing piece, unless the
// profile is best effort, which records what it left out in Applied.Missing.
package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Profile names.
const (
	// ProfileWorkspace confines a child's files to its working directory and a private
	// temporary directory, read-only system and interpreter files, and hides the data
	// directory, the home directory and other sessions; network as configured.
	ProfileWorkspace = "workspace"
	// ProfileStrict is ProfileWorkspace with no network and no executables outside the
	// interpreter's prefix.
	ProfileStrict = "strict"
	// ProfileNone confines nothing.
	ProfileNone = "none"
	// bestEffortSuffix accepts less than the profile asks where the kernel lacks it.
	bestEffortSuffix = ":best-effort"
)

// DefaultProfile is the profile of a child whose profile is not given.
const DefaultProfile = ProfileWorkspace

// ErrProfile is a profile or network setting that is not one kiln knows.
var ErrProfile = errors.New("sandbox: unknown profile")

// ErrUnavailable is a profile the kernel cannot give in full, and that is not best
// effort. The error names the missing piece.
var ErrUnavailable = errors.New("sandbox: the kernel cannot give the profile")

// Profile is a confinement profile: a name and whether less may be accepted.
type Profile struct {
	Name       string // ProfileWorkspace, ProfileStrict or ProfileNone
	BestEffort bool   // accept less than Name asks, recording what was left out
	// Default marks a profile that no one gave: best effort where the kernel lacks a
	// piece. A start that learns it lacks one (see ProbeOnStart) starts again as best
	// effort and warns (DefaultLacks).
	Default bool
}

// DefaultLacks is the warning that the default profile starts without a piece the
// kernel lacks.
const DefaultLacks = "the default sandbox, workspace, starts without what the kernel lacks; --sandbox workspace requires it, --sandbox none confines nothing"

// ParseProfile reads "workspace", "strict" or "none", each optionally followed by
// ":best-effort"; the empty string is DefaultProfile.
func ParseProfile(s string) (Profile, error) {
	if s == "" {
		return Profile{Name: DefaultProfile}, nil
	}
	name, best := strings.CutSuffix(s, bestEffortSuffix)
	switch name {
	case ProfileWorkspace, ProfileStrict:
		return Profile{Name: name, BestEffort: best}, nil
	case ProfileNone:
		if best {
			return Profile{}, fmt.Errorf("%w: %q (none is never best effort)", ErrProfile, s)
		}
		return Profile{Name: name}, nil
	}
	return Profile{}, fmt.Errorf("%w: %q (want workspace, strict or none, optionally :best-effort)", ErrProfile, s)
}

// String is the profile as ParseProfile reads it.
func (p Profile) String() string {
	if p.Name == "" {
		return ProfileNone
	}
	if p.BestEffort {
		return p.Name + bestEffortSuffix
	}
	return p.Name
}

// Confines reports whether the profile confines anything.
func (p Profile) Confines() bool { return p.Name != "" && p.Name != ProfileNone }

// Network modes.
const (
	NetworkHost = "host" // the host's network, unrestricted
	NetworkNone = "none" // no network at all: an empty network namespace
	// NetworkPorts allows TCP connections to the listed ports only (Landlock ABI 4).
	NetworkPorts = "ports"
)

// Network is what a confined child may reach over the network.
type Network struct {
	Mode  string   // NetworkHost (the default), NetworkNone or NetworkPorts
	Ports []uint16 // the TCP ports a NetworkPorts child may connect to
}

// ParseNetwork reads "host", "none" or a comma-separated list of TCP ports; the empty
// string is NetworkHost.
func ParseNetwork(s string) (Network, error) {
	switch s {
	case "", NetworkHost:
		return Network{Mode: NetworkHost}, nil
	case NetworkNone:
		return Network{Mode: NetworkNone}, nil
	}
	var n Network
	for f := range strings.SplitSeq(s, ",") {
		port, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || port == 0 {
			return Network{}, fmt.Errorf("%w: network %q (want host, none or a list of TCP ports)", ErrProfile, s)
		}
		n.Ports = append(n.Ports, uint16(port))
	}
	slices.Sort(n.Ports)
	n.Ports = slices.Compact(n.Ports)
	n.Mode = NetworkPorts
	return n, nil
}

// String is the network as ParseNetwork reads it.
func (n Network) String() string {
	if n.Mode != NetworkPorts {
		if n.Mode == "" {
			return NetworkHost
		}
		return n.Mode
	}
	ports := make([]string, len(n.Ports))
	for i, p := range n.Ports {
		ports[i] = strconv.Itoa(int(p))
	}
	return strings.Join(ports, ",")
}
