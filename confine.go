package kiln

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kilnrt/kiln/internal/sandbox"
)

// Sandbox profiles, for WorkbenchOptions.Sandbox, RunnerOptions.Sandbox and
// ServeOptions.Sandbox (see docs/sandbox.md).
const (
	SandboxWorkspace = sandbox.ProfileWorkspace
	SandboxStrict    = sandbox.ProfileStrict
	SandboxNone      = sandbox.ProfileNone
)

// DefaultSandbox is the profile of options that give none. It is none until every
// suite of kiln's own runs green under workspace: tests that reach the host's files
// from cells must first say so.
const DefaultSandbox = SandboxNone

// ErrSandboxUnavailable is a sandbox profile the kernel cannot give in full; the error
// names the missing piece. A profile with ":best-effort" starts with less instead.
var ErrSandboxUnavailable = sandbox.ErrUnavailable

// confinement is how a workbench's or a runner's children are confined: the policy
// parsed from the options, and the kernel's mechanisms, probed once.
type confinement struct {
	policy sandbox.Policy
	host   *sandbox.Host
}

// newConfinement parses profile and network, and probes the kernel (unless host, a
// daemon's shared probe, is given) when the profile confines. dataDir is hidden from
// the children.
func newConfinement(ctx context.Context, profile, network, dataDir string, host *sandbox.Host, log *slog.Logger) (confinement, error) {
	if profile == "" {
		profile = DefaultSandbox
	}
	prof, err := sandbox.ParseProfile(profile)
	if err != nil {
		return confinement{}, fmt.Errorf("kiln: --sandbox: %w", err)
	}
	net, err := sandbox.ParseNetwork(network)
	if err != nil {
		return confinement{}, fmt.Errorf("kiln: --network: %w", err)
	}
	c := confinement{policy: sandbox.Policy{Profile: prof, Network: net, Hide: []string{dataDir}}, host: host}
	if prof.Confines() && c.host == nil {
		c.host = sandbox.Probe(ctx, log)
	}
	return c, nil
}

// with is the policy with dirs writable beside the child's working directory.
func (c confinement) with(dirs ...string) sandbox.Policy {
	p := c.policy
	p.Private = append(p.Private[:len(p.Private):len(p.Private)], dirs...)
	return p
}
