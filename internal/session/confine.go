package session

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/kilnrt/kiln/internal/sandbox"
)

// DefaultSandbox is the profile of a configuration that gives none: workspace. A
// default the kernel cannot give in full starts as best effort, records what it left
// out with each start, and warns once; a profile given explicitly fails instead. Code
// that must reach the host's files outside its workspace asks for none.
const DefaultSandbox = sandbox.ProfileWorkspace

// Confinement is how a session's or a runner's children are confined: the policy
// parsed from the configuration, and the kernel's mechanisms, probed once.
type Confinement struct {
	Policy sandbox.Policy
	Host   *sandbox.Host // nil when the profile confines nothing
}

// NewConfinement parses profile and network, and probes the kernel (unless host, a
// daemon's shared probe, is given) when the profile confines: at once with eager, as a
// daemon does, whose workers are forked; else the namespaces at the first start that
// makes them (sandbox.ProbeOnStart), which spares a one-shot runner a child. dataDir
// is hidden from the children.
func NewConfinement(ctx context.Context, profile, network, dataDir string, host *sandbox.Host, eager bool, log *slog.Logger) (Confinement, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	byDefault := profile == ""
	if byDefault {
		profile = DefaultSandbox
	}
	prof, err := sandbox.ParseProfile(profile)
	if err != nil {
		return Confinement{}, fmt.Errorf("kiln: --sandbox: %w", err)
	}
	net, err := sandbox.ParseNetwork(network)
	if err != nil {
		return Confinement{}, fmt.Errorf("kiln: --network: %w", err)
	}
	c := Confinement{Policy: sandbox.Policy{Profile: prof, Network: net, Hide: []string{dataDir}}, Host: host}
	if prof.Confines() && c.Host == nil {
		if eager {
			c.Host = sandbox.Probe(ctx, log)
		} else {
			c.Host = sandbox.ProbeOnStart(log)
		}
	}
	if byDefault {
		// Best effort where the kernel lacks a piece: known now, or learned by the first
		// start, which then starts again so and warns.
		c.Policy.Profile.Default = true
		lacks, err := c.Host.Lacks(c.Policy)
		if err != nil {
			return Confinement{}, fmt.Errorf("kiln: sandbox: %w", err)
		}
		if len(lacks) > 0 {
			c.Policy.Profile.BestEffort = true
			log.Warn(sandbox.DefaultLacks, "missing", strings.Join(lacks, "; "))
		}
	}
	return c, nil
}

// With is the policy with dirs writable beside the child's working directory.
func (c Confinement) With(dirs ...string) sandbox.Policy {
	p := c.Policy
	p.Private = append(p.Private[:len(p.Private):len(p.Private)], dirs...)
	return p
}
