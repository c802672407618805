package kiln

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/program"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/session"
)

// Program is one run's input: Source, the namespaces of bindings it may call, and its
// limits. A program is model-written Python run once, in a fresh python3 -I child,
// over the fd-3 protocol (docs/programs.md), as the body of an async function: it may
// await the host's bindings, and what it returns is its completion.
//
//	res, err := kiln.Run(ctx, kiln.Program{
//		Source: "hits = await tools.search({'q': 'kiln'})\nreturn len(hits)",
//		Namespaces: []kiln.Namespace{{
//			Global: "tools",
//			Funcs: map[string]kiln.Func{
//				"search": func(ctx context.Context, args kiln.Value) (kiln.Value, error) {
//					return kiln.Array{kiln.String("a"), kiln.String("b")}, nil
//				},
//			},
//		}},
//		Limits: kiln.Limits{Wall: 30 * time.Second},
//	})
//	// res.Status == kiln.RunOK, res.Value == kiln.Number(2)
//
// To run more than one program, a Runner resolves the interpreter once and keeps
// children booted ahead of time:
//
//	r, err := kiln.NewRunner(ctx, kiln.RunnerOptions{Pool: 2})
//	if err != nil { … }
//	defer r.Close()
//	res, err := r.Run(ctx, kiln.Program{Source: "return 1"})
type Program struct {
	// Source is the program: Python, the body of an async function.
	Source string `json:"source"`
	// Namespaces are the proxy globals it may call, in JSON without their Funcs.
	Namespaces []Namespace `json:"namespaces,omitempty"`
	// Limits bound the run.
	Limits Limits `json:"limits"`
}

// Namespace is one proxy global of a program, Global, whose members are the Funcs:
// await tools.search(args) calls Funcs["search"]. Its JSON leaves the Funcs out.
type Namespace struct {
	// Global is the global's name, a Python identifier.
	Global string `json:"global"`
	// Funcs are the bindings, by name. A namespace from Toolset.Namespaces has its tools
	// besides, which Funcs add to, a Func replacing the tool of its name.
	Funcs map[string]Func `json:"-"`
	// ErrorClass is what a rejected call raises; nil means RuntimeError.
	ErrorClass *ErrorClass `json:"error_class,omitempty"`
	// MaxConcurrent is how many calls of the namespace's bindings run at once in one
	// run; the others wait their turn. 0 means no limit. A call holds its turn until
	// its reply is queued, so bindings whose results are large (a file's text) make the
	// host hold a few of them, not one per call.
	MaxConcurrent int `json:"max_concurrent,omitzero"`

	// tools are a Toolset's tools by name, bindings that take and give lossless values
	// as a program's calls carry them, with no conversion on the way.
	tools map[string]program.Func
}

// Func is a binding. It runs on its own goroutine, and its ctx ends when the run
// settles; it should return then: one that does not is abandoned, its result
// discarded, and neither the run nor Close waits for it. An error rejects the call
// with its message; a result must be lossless (no NaN, infinity or −0), or the call
// is rejected.
type Func func(ctx context.Context, args Value) (Value, error)

// ErrorClass names the exception class a namespace's rejected calls raise:
// Name(message), with the binding's name on the attribute MemberNameProperty.
type ErrorClass struct {
	Name               string `json:"name"`
	MemberNameProperty string `json:"member_name_property"`
}

// Limits bound one run; a zero field takes its default. Its JSON is the limits a
// daemon's program request carries: {"cpu_seconds","wall_ms","memory_bytes",
// "max_log_bytes","max_value_bytes","max_processes"}.
type Limits struct {
	// CPUSeconds is the child's CPU time, its start included; default 60.
	CPUSeconds int
	// Wall is the wall clock, from spawn or from a pooled child's hand-off; default 600 s.
	Wall time.Duration
	// AddressSpaceBytes is the child's address space; default 512 MiB.
	AddressSpaceBytes int64
	// MaxLogBytes is the log budget, the logs as a JSON array of strings; default 64 KiB.
	MaxLogBytes int
	// MaxValueBytes is the completion value's budget, in bytes of JSON; default 32 KiB.
	MaxValueBytes int
	// MaxProcesses is how many processes and threads the child may start beyond those
	// its user has (RLIMIT_NPROC, which the kernel does not apply to root); default 64.
	MaxProcesses int
}

// limitsJSON is the JSON form of Limits: what a daemon's program request carries
// (api.ProgramLimits, which a test holds it to).
type limitsJSON struct {
	CPUSeconds    int   `json:"cpu_seconds"`
	WallMS        int64 `json:"wall_ms"`
	MemoryBytes   int64 `json:"memory_bytes"`
	MaxLogBytes   int   `json:"max_log_bytes"`
	MaxValueBytes int   `json:"max_value_bytes"`
	MaxProcesses  int   `json:"max_processes"`
}

// maxWallMS is the largest wall_ms a time.Duration holds.
const maxWallMS = math.MaxInt64 / int64(time.Millisecond)

// MarshalJSON implements json.Marshaler. A wall clock finer than a millisecond is
// rounded up: the limit is never made shorter.
func (l Limits) MarshalJSON() ([]byte, error) {
	wall := int64(l.Wall / time.Millisecond)
	if l.Wall%time.Millisecond > 0 {
		wall++
	}
	return json.Marshal(limitsJSON{CPUSeconds: l.CPUSeconds, WallMS: wall,
		MemoryBytes: l.AddressSpaceBytes, MaxLogBytes: l.MaxLogBytes, MaxValueBytes: l.MaxValueBytes,
		MaxProcesses: l.MaxProcesses})
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *Limits) UnmarshalJSON(data []byte) error {
	var j limitsJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("kiln: limits: %w", err)
	}
	var err error
	*l, err = limitsFrom(j)
	return err
}

// limitsFrom is the Limits of their JSON form, a wall_ms that a time.Duration cannot hold
// refused.
func limitsFrom(j limitsJSON) (Limits, error) {
	if j.WallMS < 0 || j.WallMS > maxWallMS {
		return Limits{}, fmt.Errorf("kiln: limits: wall_ms %d is outside 0..%d", j.WallMS, maxWallMS)
	}
	return Limits{CPUSeconds: j.CPUSeconds, Wall: time.Duration(j.WallMS) * time.Millisecond,
		AddressSpaceBytes: j.MemoryBytes, MaxLogBytes: j.MaxLogBytes, MaxValueBytes: j.MaxValueBytes,
		MaxProcesses: j.MaxProcesses}, nil
}

// Result is how a run ended. Its JSON is what kiln run --json prints and a daemon
// answers a program with: see MarshalJSON.
type Result struct {
	// Status is how the run ended.
	Status RunStatus
	// Value is the completion, for RunOK; nil is null, and so is every other status's.
	Value Value
	// Logs are what the program printed, a line each, never nil; the marker
	// "[kiln] log capture truncated at N bytes" is last if the budget ran out.
	Logs []string
	// Error says why, for any status but RunOK.
	Error string
	// ExitCode and Signal say how python ended when that ended the run (RunWorkerExit,
	// or a CPU timeout): its exit status (−1 if a signal ended it) and the signal's
	// name ("SIGXCPU"); else 0 and "".
	ExitCode int
	Signal   string
	// Wall is the run's wall-clock time, CPU python's user and system time, its start
	// included.
	Wall time.Duration
	CPU  time.Duration
	// Dropped counts the child's frames dropped as junk or out of turn.
	Dropped int
	// Sandbox is what confined the child; nil when none started.
	Sandbox *SandboxApplied
}

// SandboxApplied is what confined a child: its profile, namespaces, Landlock ABI,
// seccomp filter, network, cgroup limits, and what a best-effort profile left out.
type SandboxApplied = sandbox.Applied

// RunStatus is a Result's status.
type RunStatus string

// Run statuses.
const (
	RunOK            = RunStatus(program.StatusOK)            // returned a lossless value within budget
	RunException     = RunStatus(program.StatusException)     // raised
	RunInvalidOutput = RunStatus(program.StatusInvalidOutput) // returned a value JSON cannot carry exactly
	RunOutputLimit   = RunStatus(program.StatusOutputLimit)   // returned a value over Limits.MaxValueBytes
	RunTimeout       = RunStatus(program.StatusTimeout)       // ran out of wall clock or CPU time
	RunAbort         = RunStatus(program.StatusAbort)         // its context ended first
	RunWorkerExit    = RunStatus(program.StatusWorkerExit)    // python ended, or broke the protocol, without completing
)

// programTo is the internal program of p.
func programTo(p Program) program.Program {
	var namespaces []program.Namespace
	for _, n := range p.Namespaces {
		namespaces = append(namespaces, namespaceTo(n))
	}
	return program.Program{Source: p.Source, Namespaces: namespaces, Limits: program.Limits(p.Limits)}
}

// namespaceTo is the internal namespace of n.
func namespaceTo(n Namespace) program.Namespace {
	var funcs map[string]program.Func
	if n.Funcs != nil || n.tools != nil {
		funcs = make(map[string]program.Func, len(n.tools)+len(n.Funcs))
		maps.Copy(funcs, n.tools)
		for name, f := range n.Funcs {
			funcs[name] = func(ctx context.Context, args lossless.Value) (lossless.Value, error) {
				v, err := f(ctx, valueFrom(args))
				if err != nil {
					return nil, err
				}
				return valueTo(v)
			}
		}
	}
	return program.Namespace{Global: n.Global, Funcs: funcs, ErrorClass: (*program.ErrorClass)(n.ErrorClass),
		MaxConcurrent: n.MaxConcurrent}
}

// resultFrom is the public result of r: its Value only for RunOK, its ExitCode and
// Signal only when python's end ended the run.
func resultFrom(r program.Result) Result {
	res := Result{Status: RunStatus(r.Status), Logs: r.Logs, Error: r.Error, Signal: r.Signal,
		Wall: r.Wall, CPU: r.CPU, Dropped: r.Dropped}
	if r.Sandbox.Profile != "" {
		res.Sandbox = new(r.Sandbox)
	}
	if res.Logs == nil {
		res.Logs = []string{}
	}
	if res.Status == RunOK {
		res.Value = valueFrom(r.Value)
	}
	if res.Status == RunWorkerExit || r.Signal != "" {
		res.ExitCode = r.ExitCode
	}
	return res
}

// Errors a caller tells apart with errors.Is.
var (
	// ErrInvalidProgram is a Program that cannot run: a limit out of range, or a
	// namespace that is not well formed.
	ErrInvalidProgram = program.ErrInvalid
	// ErrRunnerClosed is a run started on a closed Runner.
	ErrRunnerClosed = program.ErrClosed
)

// RunnerOptions configure a Runner. The zero value is ready to use.
type RunnerOptions struct {
	Python string        // interpreter, a path or a name in PATH; default DefaultPython
	Dir    string        // the programs' working directory; default the host's
	Pool   int           // children kept booted ahead of time per configuration; 0 for none
	Grace  time.Duration // from SIGTERM to SIGKILL when the host ends a child; default 1s
	Logger *slog.Logger  // nil discards
	// Sandbox and Network confine the children as WorkbenchOptions' do; DataDir, when
	// given, is hidden from them.
	Sandbox, Network, DataDir string
	// SandboxHost is a probe of the kernel shared with the sessions of the same process
	// (a daemon's), so that their cgroups do not collide; nil probes. Only kiln's own
	// packages make one.
	SandboxHost *sandbox.Host
}

// Runner runs programs. Its methods are safe for concurrent use.
//
// With a Pool, a Runner keeps that many children booted (limits applied, bindings
// declared, waiting for their program) for each configuration, the limits and the
// namespaces' globals, names and error classes, that it has run: a run takes a child
// booted with exactly its own configuration, or starts one. A child serves one run
// and is replaced once that run has settled; a run's wall clock starts when it takes
// the child.
type Runner struct {
	r *program.Runner
}

// NewRunner resolves the interpreter and returns a Runner. Its first child's start
// compiles the Python side once (or takes its bytecode from the user's cache
// directory), while that child's interpreter starts; a compilation that fails fails
// that run, as a python that cannot start does.
func NewRunner(ctx context.Context, opts RunnerOptions) (*Runner, error) {
	if opts.Python == "" {
		opts.Python = DefaultPython(os.Getenv)
	}
	// Discovery is bounded by its own timeout and not by ctx, so that a run whose ctx
	// ends early is reported as an abort, not as an interpreter that failed its probe.
	python, err := interp.Find(context.WithoutCancel(ctx), opts.Python)
	if err != nil {
		return nil, err
	}
	confine, err := session.NewConfinement(ctx, opts.Sandbox, opts.Network, opts.DataDir, opts.SandboxHost, false, opts.Logger)
	if err != nil {
		return nil, err
	}
	r, err := program.NewRunner(context.WithoutCancel(ctx), program.Options{
		Python:      python.Path,
		Dir:         opts.Dir,
		Pool:        opts.Pool,
		Grace:       opts.Grace,
		Precompile:  true,
		Logger:      opts.Logger,
		Sandbox:     confine.Policy,
		SandboxHost: confine.Host,
	})
	if err != nil {
		return nil, err
	}
	return &Runner{r: r}, nil
}

// Run runs p and returns how it ended. The error is ErrInvalidProgram or
// ErrRunnerClosed; whatever happens to the program is in the Result. Cancelling ctx
// aborts the run (RunAbort).
func (r *Runner) Run(ctx context.Context, p Program) (Result, error) {
	res, err := r.r.Run(ctx, programTo(p))
	return resultFrom(res), err
}

// Warm boots the pool's children for p's configuration ahead of its runs, and waits
// until they are ready.
func (r *Runner) Warm(ctx context.Context, p Program) error {
	return r.r.Warm(ctx, programTo(p))
}

// Close aborts the runs in progress, ends every pooled child, and returns once all
// have been reaped.
func (r *Runner) Close() error { return r.r.Close() }

// Run runs p once in a fresh child and returns how it ended; see Runner.Run. It
// resolves the interpreter each time, and takes the bytecode of kiln's Python side from
// the user's cache directory (compiled and kept there the first time): to run more
// than one program, use a Runner.
func Run(ctx context.Context, p Program) (Result, error) {
	r, err := NewRunner(ctx, RunnerOptions{})
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	return r.Run(ctx, p)
}

// resultJSON is res as one JSON object, as kiln run --json prints it and the daemon
// answers a program: {"status","value","logs","error","wall_ms","cpu_ms","exit_code",
// "signal"}, with "dropped" when it is not 0. The value is exact; error is null for
// RunOK, value null for any other status, and exit_code and signal are null unless
// python's end ended the run. The times are whole milliseconds, as a cell record's
// duration_ms. Its error is ErrNotValue, of a Value that is none.
func resultJSON(res Result) ([]byte, error) {
	var value, errText lossless.Value
	if res.Status == RunOK {
		var err error
		if value, err = valueTo(res.Value); err != nil {
			return nil, fmt.Errorf("kiln: result: value: %w", err)
		}
	} else {
		errText = lossless.String(res.Error)
	}
	logs := make(lossless.Array, len(res.Logs))
	for i, l := range res.Logs {
		logs[i] = lossless.String(l)
	}
	var exitCode, sig lossless.Value
	if res.Status == RunWorkerExit || res.Signal != "" {
		exitCode = lossless.Number(res.ExitCode)
	}
	if res.Signal != "" {
		sig = lossless.String(res.Signal)
	}
	members := []lossless.Member{
		{Key: "status", Value: lossless.String(res.Status)},
		{Key: "value", Value: value},
		{Key: "logs", Value: logs},
		{Key: "error", Value: errText},
		{Key: "wall_ms", Value: lossless.Number(res.Wall.Milliseconds())},
		{Key: "cpu_ms", Value: lossless.Number(res.CPU.Milliseconds())},
		{Key: "exit_code", Value: exitCode},
		{Key: "signal", Value: sig},
	}
	if res.Dropped != 0 {
		members = append(members, lossless.Member{Key: "dropped", Value: lossless.Number(res.Dropped)})
	}
	if res.Sandbox != nil {
		data, err := json.Marshal(res.Sandbox)
		if err != nil {
			return nil, fmt.Errorf("kiln: result: sandbox: %w", err)
		}
		v, err := lossless.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("kiln: result: sandbox: %w", err)
		}
		members = append(members, lossless.Member{Key: "sandbox", Value: v})
	}
	return lossless.Encode(lossless.NewObject(members...)), nil
}

// MarshalJSON implements json.Marshaler: it returns r as one JSON object, as kiln run --json prints it and the
// daemon answers a program: {"status","value","logs","error","wall_ms","cpu_ms",
// "exit_code","signal"}, with "dropped" when it is not 0. The value is exact; error is
// null for RunOK, value null for any other status, and exit_code and signal are null
// unless python's end ended the run. The times are whole milliseconds, as a cell
// record's duration_ms. Its error is ErrNotValue, of a Value that is none.
func (r Result) MarshalJSON() ([]byte, error) { return resultJSON(r) }

// UnmarshalJSON implements json.Unmarshaler, reading what MarshalJSON writes.
func (r *Result) UnmarshalJSON(data []byte) error {
	var j struct {
		Status   RunStatus       `json:"status"`
		Value    jsontext.Value  `json:"value"`
		Logs     []string        `json:"logs"`
		Error    *string         `json:"error"`
		WallMs   int64           `json:"wall_ms"`
		CPUMs    int64           `json:"cpu_ms"`
		ExitCode *int            `json:"exit_code"`
		Signal   *string         `json:"signal"`
		Dropped  int             `json:"dropped"`
		Sandbox  *SandboxApplied `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("kiln: result: %w", err)
	}
	res := Result{Status: j.Status, Logs: j.Logs, Wall: time.Duration(j.WallMs) * time.Millisecond,
		CPU: time.Duration(j.CPUMs) * time.Millisecond, Dropped: j.Dropped, Sandbox: j.Sandbox}
	if len(j.Value) > 0 {
		v, err := DecodeValue(j.Value)
		if err != nil {
			return fmt.Errorf("kiln: result: value: %w", err)
		}
		res.Value = v
	}
	if res.Logs == nil {
		res.Logs = []string{}
	}
	if j.Error != nil {
		res.Error = *j.Error
	}
	if j.ExitCode != nil {
		res.ExitCode = *j.ExitCode
	}
	if j.Signal != nil {
		res.Signal = *j.Signal
	}
	*r = res
	return nil
}

// Python is an interpreter as kiln resolves the name given as WorkbenchOptions.Python or
// RunnerOptions.Python.
type Python struct {
	Path    string // the interpreter's own executable: workers and programs are started by it
	Version string // e.g. "3.11.7"
	// Wrapper is the path the name was found at when that is a wrapper that runs Path,
	// such as a version manager's shim; "" when it is Path itself.
	Wrapper string
}

// FindPython resolves name ("" for DefaultPython) as a workbench and a runner do, and
// checks that it is CPython 3.10 or newer. A wrapper is run at each resolution to learn
// what it runs (what an interpreter itself says is kept in the user's cache directory):
// naming Path instead spares that at every start.
func FindPython(ctx context.Context, name string) (Python, error) {
	if name == "" {
		name = DefaultPython(os.Getenv)
	}
	in, err := interp.Find(ctx, name)
	if err != nil {
		return Python{}, err
	}
	return Python{Path: in.Path, Version: in.Version, Wrapper: in.Wrapper}, nil
}
