// Package interp finds the CPython interpreter kiln runs: it resolves a name such as
// "python3" — through PATH and through wrappers like version-manager shims — to the
// interpreter's own executable, and checks its version once, so that every worker and
// program is started by exec'ing the real binary directly.
package interp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// MinMajor and MinMinor are the oldest CPython kiln supports.
const (
	MinMajor = 3
	MinMinor = 10
)

// probeTimeout bounds the version probe.
const probeTimeout = 10 * time.Second

// ErrUnsupported is an interpreter that is not CPython 3.10 or newer, or not Python.
var ErrUnsupported = errors.New("interp: unsupported interpreter")

// Interpreter is a resolved CPython.
type Interpreter struct {
	Path    string // sys.executable: the binary itself
	Version string // e.g. "3.11.7"
}

// probe prints what Find needs, one item a line, without running site hooks.
const probe = `import sys
print(sys.executable)
print(sys.implementation.name)
print("%d.%d.%d" % sys.version_info[:3])
`

// Find resolves name (a path, or a command looked up in PATH) and checks that it is
// CPython 3.10 or newer.
func Find(ctx context.Context, name string) (Interpreter, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return Interpreter{}, fmt.Errorf("interp: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "-I", "-S", "-c", probe)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Interpreter{}, fmt.Errorf("%w: %s: %v: %s", ErrUnsupported, path, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) < 3 {
		return Interpreter{}, fmt.Errorf("%w: %s: unexpected probe output %q", ErrUnsupported, path, stdout.String())
	}
	in := Interpreter{Path: lines[0], Version: lines[2]}
	if lines[1] != "cpython" {
		return Interpreter{}, fmt.Errorf("%w: %s is %s, not CPython", ErrUnsupported, path, lines[1])
	}
	if !atLeast(in.Version, MinMajor, MinMinor) {
		return Interpreter{}, fmt.Errorf("%w: %s is Python %s; kiln needs %d.%d or newer", ErrUnsupported, path, in.Version, MinMajor, MinMinor)
	}
	if in.Path == "" {
		in.Path = path
	}
	return in, nil
}

// atLeast reports whether version "X.Y.Z" is at least major.minor.
func atLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	x, err1 := strconv.Atoi(parts[0])
	y, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return x > major || x == major && y >= minor
}
