// Package program runs one-shot Python programs over the fd-3 protocol
// (docs/programs.md): a model-written program runs once in a fresh python3 -I child,
// calls host bindings, logs, and returns a completion value, all as JSON lines on fd 3.
//
// The child is hostile. Every line it sends is capped in bytes before it is parsed
// (FrameCap), checked to be UTF-8 without an integer a double would round, parsed,
// and rebuilt field by field (ParseChildFrame); what fails is dropped and counted.
// Its completion value is metered again on the host. Its resources are bounded by the
// limits the child applies to itself at boot and by the host's own wall clock; at
// settlement its whole process group is killed and its private directory removed.
//
// A Runner starts children, and keeps a warm pool of them booted ahead of time for
// each boot configuration (limits and namespaces), so that a run costs little more
// than the program itself.
package program

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/sandbox"
)

// Defaults for Limits, the reference implementation's.
const (
	DefaultCPUSeconds        = 60
	DefaultWall              = 600 * time.Second
	DefaultAddressSpaceBytes = 512 << 20
	DefaultMaxLogBytes       = 64 << 10
	DefaultMaxValueBytes     = 32 << 10
	DefaultMaxProcesses      = 64
)

// Bounds on Limits, checked by Run.
const (
	// MinLogBytes is the smallest log budget: room for a few short lines.
	MinLogBytes = 64
	// MaxCPUSeconds is the largest CPU limit: 2^31−1 seconds, some 68 years. Past it
	// the limit would no longer fit a time.Duration, nor the child's arithmetic on its
	// rlimit, and would wrap to a small or nonsensical one.
	MaxCPUSeconds = 1<<31 - 1
	// MaxBudgetBytes is the largest log or value budget. A run's frame cap, and so
	// what the host may spend parsing one of its frames, follows its larger budget.
	MaxBudgetBytes = 64 << 20
	// budgetMemoryFactor and reservedAddressSpace check that a budget is usable under
	// the address-space limit: the child may hold a value or a log line several times
	// over while it encodes it, on top of the interpreter itself.
	budgetMemoryFactor   = 12
	reservedAddressSpace = 64 << 20
)

// ErrInvalid is a Program that cannot run: a limit out of range, or a namespace that
// is not well formed.
var ErrInvalid = errors.New("program: invalid program")

// Limits bound one run. A zero field takes its default.
type Limits struct {
	// CPUSeconds is the child's CPU time limit (RLIMIT_CPU soft; the hard limit is one
	// more), counted from the child's start, its bootstrap included.
	CPUSeconds int
	// Wall is the host's wall-clock limit, from just before spawn or, for a child from
	// the warm pool, from hand-off; the time a Runner's first spawn takes to make the
	// packages' archive (a compilation, when the cache has none) is not counted.
	Wall time.Duration
	// AddressSpaceBytes is the child's RLIMIT_AS.
	AddressSpaceBytes int64
	// MaxLogBytes is the log budget: the logs, as a JSON array of strings, fit in it
	// (the truncation marker aside).
	MaxLogBytes int
	// MaxValueBytes is the completion value budget, in bytes of JSON.stringify's text.
	MaxValueBytes int
	// MaxProcesses is how many more processes and threads than its user already has
	// the child may start: its RLIMIT_NPROC, which the kernel counts per user and does
	// not enforce for root (docs/programs.md).
	MaxProcesses int
}

func (l Limits) withDefaults() Limits {
	if l.CPUSeconds == 0 {
		l.CPUSeconds = DefaultCPUSeconds
	}
	if l.Wall == 0 {
		l.Wall = DefaultWall
	}
	if l.AddressSpaceBytes == 0 {
		l.AddressSpaceBytes = DefaultAddressSpaceBytes
	}
	if l.MaxLogBytes == 0 {
		l.MaxLogBytes = DefaultMaxLogBytes
	}
	if l.MaxValueBytes == 0 {
		l.MaxValueBytes = DefaultMaxValueBytes
	}
	if l.MaxProcesses == 0 {
		l.MaxProcesses = DefaultMaxProcesses
	}
	return l
}

// check returns an error if l, defaults applied, is out of range.
func (l Limits) check() error {
	switch {
	case l.CPUSeconds < 1 || l.CPUSeconds > MaxCPUSeconds:
		return fmt.Errorf("%w: CPUSeconds %d is outside 1..%d", ErrInvalid, l.CPUSeconds, MaxCPUSeconds)
	case l.Wall <= 0:
		return fmt.Errorf("%w: Wall %v is not positive", ErrInvalid, l.Wall)
	case l.MaxProcesses < 1:
		return fmt.Errorf("%w: MaxProcesses %d is not positive", ErrInvalid, l.MaxProcesses)
	case l.MaxLogBytes < MinLogBytes || l.MaxLogBytes > MaxBudgetBytes:
		return fmt.Errorf("%w: MaxLogBytes %d is outside %d..%d", ErrInvalid, l.MaxLogBytes, MinLogBytes, MaxBudgetBytes)
	case l.MaxValueBytes < 1 || l.MaxValueBytes > MaxBudgetBytes:
		return fmt.Errorf("%w: MaxValueBytes %d is outside 1..%d", ErrInvalid, l.MaxValueBytes, MaxBudgetBytes)
	case l.AddressSpaceBytes <= reservedAddressSpace ||
		int64(max(l.MaxLogBytes, l.MaxValueBytes))*budgetMemoryFactor >= l.AddressSpaceBytes-reservedAddressSpace:
		return fmt.Errorf("%w: AddressSpaceBytes %d leaves no room for the budgets: it must exceed 64 MiB plus %d times the larger budget",
			ErrInvalid, l.AddressSpaceBytes, budgetMemoryFactor)
	}
	return nil
}

// Func is a binding: the host function a program calls as await global.name(args).
// It runs on its own goroutine; ctx ends when the run settles, and the binding should
// return then: one that does not is abandoned, its result discarded, and neither the
// run nor Runner.Close waits for it. An error rejects the call with its message; the
// result must be lossless (no NaN, infinity or −0).
type Func func(ctx context.Context, args lossless.Value) (lossless.Value, error)

// Namespace is one proxy global of the program and the bindings it serves.
type Namespace struct {
	Global     string          // a Python identifier
	Funcs      map[string]Func // by binding name
	ErrorClass *ErrorClass     // what a rejected call raises; nil means RuntimeError
	// MaxConcurrent is how many calls of the namespace's bindings run at once in one
	// run; the others wait their turn. 0 means no limit. A call holds its turn until
	// its reply is queued, and starts only once the replies waiting leave room: so
	// bindings whose results are large (a file's text) make the host hold a few of
	// them, not one per call.
	MaxConcurrent int
}

// Program is one run's input.
type Program struct {
	Source     string // Python; the body of an async function, so it may await and return
	Namespaces []Namespace
	Limits     Limits
}

// Status is how a run ended.
type Status string

// Run statuses. The first four come from the child's done frame (the host re-checks
// the value it carries); the others the host observes.
const (
	StatusOK            Status = "ok"             // the program returned a lossless value within budget
	StatusException     Status = "exception"      // the program raised
	StatusInvalidOutput Status = "invalid-output" // the value is not lossless JSON
	StatusOutputLimit   Status = "output-limit"   // the value exceeds MaxValueBytes
	StatusTimeout       Status = "timeout"        // the wall clock or the CPU limit ran out
	StatusAbort         Status = "abort"          // the caller's context ended first
	StatusWorkerExit    Status = "worker-exit"    // python ended or broke the protocol without done
)

// Result is how a run ended.
type Result struct {
	Status Status
	Value  lossless.Value // the completion, for StatusOK; nil is null
	Logs   []string       // never nil; the truncation marker, if any, last
	Error  string         // why, for any status but ok
	// ExitCode and Signal say how python ended, for worker-exit and CPU timeouts:
	// the exit status (−1 if a signal ended it) and the signal's name ("SIGXCPU").
	ExitCode int
	Signal   string
	Wall     time.Duration // from the start of the wall clock to settlement
	CPU      time.Duration // python's user and system time, its bootstrap included
	Dropped  int           // child frames dropped as junk or out of turn
	// Sandbox is what confined the child; zero when no child started.
	Sandbox sandbox.Applied
}

// spec is a Program checked and compiled: its boot frame, its key in the warm pool
// and the binding table of the run.
type spec struct {
	limits   Limits
	frameCap int
	boot     []byte // the boot frame's text
	key      string // its configuration's key in the pool: the boot frame and what the host applies
	funcs    map[string]map[string]Func
	turns    map[string]chan struct{} // per namespace with MaxConcurrent: a token per call running
	source   string
}

func newSpec(p Program) (*spec, error) {
	s := &spec{limits: p.Limits.withDefaults(), funcs: make(map[string]map[string]Func),
		turns: make(map[string]chan struct{}), source: p.Source}
	if err := s.limits.check(); err != nil {
		return nil, err
	}
	s.frameCap = FrameCap(s.limits)
	if !utf8.ValidString(p.Source) {
		at := invalidAt(p.Source)
		return nil, fmt.Errorf("%w: the program is not valid UTF-8: the byte at offset %d (0x%02x) begins no character; it was not run", ErrInvalid, at, p.Source[at])
	}
	b := Boot{
		CPUSeconds:        s.limits.CPUSeconds,
		AddressSpaceBytes: s.limits.AddressSpaceBytes,
		MaxLogBytes:       s.limits.MaxLogBytes,
		MaxValueBytes:     s.limits.MaxValueBytes,
		Namespaces:        []NamespaceDecl{},
	}
	for _, ns := range p.Namespaces {
		if !identifier(ns.Global) {
			return nil, fmt.Errorf("%w: namespace global %q is not a Python identifier", ErrInvalid, ns.Global)
		}
		if _, dup := s.funcs[ns.Global]; dup {
			return nil, fmt.Errorf("%w: namespace %q declared twice", ErrInvalid, ns.Global)
		}
		if ec := ns.ErrorClass; ec != nil && (!identifier(ec.Name) || !identifier(ec.MemberNameProperty) ||
			len(ec.MemberNameProperty) > 1 && ec.MemberNameProperty[:2] == "__") {
			return nil, fmt.Errorf("%w: namespace %q: error class %q with member property %q", ErrInvalid, ns.Global, ec.Name, ec.MemberNameProperty)
		}
		names := slices.Sorted(maps.Keys(ns.Funcs))
		for _, n := range names {
			if n == "" || ns.Funcs[n] == nil {
				return nil, fmt.Errorf("%w: namespace %q: binding %q is empty or nil", ErrInvalid, ns.Global, n)
			}
		}
		s.funcs[ns.Global] = maps.Clone(ns.Funcs)
		switch {
		case ns.MaxConcurrent < 0:
			return nil, fmt.Errorf("%w: namespace %q: MaxConcurrent %d is negative", ErrInvalid, ns.Global, ns.MaxConcurrent)
		case ns.MaxConcurrent > 0:
			s.turns[ns.Global] = make(chan struct{}, ns.MaxConcurrent)
		}
		b.Namespaces = append(b.Namespaces, NamespaceDecl{Global: ns.Global, Names: names, ErrorClass: ns.ErrorClass})
	}
	s.boot = AppendBoot(nil, b)
	s.key = fmt.Sprintf("%s\x00%d", s.boot, s.limits.MaxProcesses)
	return s, nil
}

// invalidAt returns the offset of the first byte of s that begins no UTF-8 character.
func invalidAt(s string) int {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			return i
		}
		i += w
	}
	return len(s)
}

// identifier reports whether s is a Python identifier in ASCII that is not a keyword.
func identifier(s string) bool {
	if s == "" || pythonKeyword(s) {
		return false
	}
	for i, c := range []byte(s) {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func pythonKeyword(s string) bool {
	switch s {
	case "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
		"def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
		"is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield":
		return true
	}
	return false
}
