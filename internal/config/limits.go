package config

import (
	"errors"

	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/sandbox"
)

// Sandbox is how a daemon's sessions are confined, [sandbox]; the daemon's --sandbox
// and --network take precedence, and a session's own settings over both.
type Sandbox struct {
	// Profile is workspace, strict or none, the first two optionally ":best-effort".
	Profile string `toml:"profile"`
	// Network is host, none, or TCP ports "80,443".
	Network string `toml:"network"`
}

// validateSandbox checks a profile and a network, at the keys of their section at.
func validateSandbox(at, profile, network string) error {
	if _, err := sandbox.ParseProfile(profile); err != nil {
		key := ".sandbox"
		if at == "sandbox" {
			key = ".profile"
		}
		return refuse(at+key, "%v", err)
	}
	if _, err := sandbox.ParseNetwork(network); err != nil {
		return refuse(at+".network", "%v", err)
	}
	return nil
}

// validateLimits checks each limit of l, at the keys of its section at.
func validateLimits(at string, l limits.Session) error {
	var re *limits.RangeError
	if err := l.Check(); errors.As(err, &re) {
		return refuse(at+"."+re.Key, "must be 0 (none) or %d..%d, got %d", re.Min, re.Max, re.Got)
	}
	return nil
}
