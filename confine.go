package kiln

import (
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/session"
)

// Sandbox profiles, for WorkbenchOptions.Sandbox, RunnerOptions.Sandbox and
// ServeOptions.Sandbox (see docs/sandbox.md).
const (
	SandboxWorkspace = sandbox.ProfileWorkspace
	SandboxStrict    = sandbox.ProfileStrict
	SandboxNone      = sandbox.ProfileNone
)

// DefaultSandbox is the profile of options that give none: SandboxWorkspace, as best
// effort where the kernel lacks a piece (what was left out is recorded). Code that must
// reach the host's files outside its workspace asks for SandboxNone.
const DefaultSandbox = session.DefaultSandbox

// ErrSandboxUnavailable is a sandbox profile the kernel cannot give in full; the error
// names the missing piece. A profile with ":best-effort" starts with less instead.
var ErrSandboxUnavailable = sandbox.ErrUnavailable
