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

// DefaultSandbox is the profile of options that give none. It is none until every
// suite of kiln's own runs green under workspace: tests that reach the host's files
// from cells must first say so.
const DefaultSandbox = session.DefaultSandbox

// ErrSandboxUnavailable is a sandbox profile the kernel cannot give in full; the error
// names the missing piece. A profile with ":best-effort" starts with less instead.
var ErrSandboxUnavailable = sandbox.ErrUnavailable
