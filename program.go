package kiln

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/program"
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
type Program = program.Program

// Namespace is one proxy global of a program, Global, whose members are the Funcs:
// await tools.search(args) calls Funcs["search"]. A rejected call raises ErrorClass
// in the program, or RuntimeError if it is nil.
type Namespace = program.Namespace

// Func is a binding. It runs on its own goroutine, and its ctx ends when the run
// settles; it should return then: one that does not is abandoned, its result
// discarded, and neither the run nor Close waits for it. An error rejects the call
// with its message; a result must be lossless (no NaN, infinity or −0), or the call
// is rejected.
type Func = program.Func

// ErrorClass names the exception class a namespace's rejected calls raise:
// Name(message), with the binding's name on the attribute MemberNameProperty.
type ErrorClass = program.ErrorClass

// Limits bound one run; a zero field takes its default (60 s of CPU, 600 s of wall
// clock, 512 MiB of address space, 64 KiB of logs, a 32 KiB completion value, 64
// processes and threads beyond its user's).
type Limits = program.Limits

// Result is how a run ended: its Status, the completion Value (RunOK only), the
// Logs (the marker "[kiln] log capture truncated at N bytes" last if the budget ran
// out), the Error text for any other status, and its wall-clock and CPU time.
type Result = program.Result

// RunStatus is a Result's status.
type RunStatus = program.Status

// Run statuses.
const (
	RunOK            = program.StatusOK            // returned a lossless value within budget
	RunException     = program.StatusException     // raised
	RunInvalidOutput = program.StatusInvalidOutput // returned a value JSON cannot carry exactly
	RunOutputLimit   = program.StatusOutputLimit   // returned a value over Limits.MaxValueBytes
	RunTimeout       = program.StatusTimeout       // ran out of wall clock or CPU time
	RunAbort         = program.StatusAbort         // its context ended first
	RunWorkerExit    = program.StatusWorkerExit    // python ended, or broke the protocol, without completing
)

// Values cross between the host and a program as lossless JSON: a Value is nil
// (null), Bool, Number, String, Array or Object.
type (
	Value  = lossless.Value
	Bool   = lossless.Bool
	Number = lossless.Number
	String = lossless.String
	Array  = lossless.Array
	Object = lossless.Object
	Member = lossless.Member
)

// NewObject returns an object of members, ordered as JavaScript's Object.keys orders
// them; a key given twice keeps its first place and its last value.
func NewObject(members ...Member) Object { return lossless.NewObject(members...) }

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

// NewRunner resolves the interpreter, compiles the Python side once, and returns a
// Runner.
func NewRunner(ctx context.Context, opts RunnerOptions) (*Runner, error) {
	return newRunner(ctx, opts, true)
}

func newRunner(ctx context.Context, opts RunnerOptions, precompile bool) (*Runner, error) {
	if opts.Python == "" {
		opts.Python = DefaultPython(os.Getenv)
	}
	// Discovery is bounded by its own timeout and not by ctx, so that a run whose ctx
	// ends early is reported as an abort, not as an interpreter that failed its probe.
	python, err := interp.Find(context.WithoutCancel(ctx), opts.Python)
	if err != nil {
		return nil, err
	}
	r, err := program.NewRunner(context.WithoutCancel(ctx), program.Options{
		Python:     python.Path,
		Dir:        opts.Dir,
		Pool:       opts.Pool,
		Grace:      opts.Grace,
		Precompile: precompile,
		Logger:     opts.Logger,
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
	return r.r.Run(ctx, p)
}

// Warm boots the pool's children for p's configuration ahead of its runs, and waits
// until they are ready.
func (r *Runner) Warm(ctx context.Context, p Program) error {
	return r.r.Warm(ctx, p)
}

// Close aborts the runs in progress, ends every pooled child, and returns once all
// have been reaped.
func (r *Runner) Close() error { return r.r.Close() }

// Run runs p once in a fresh child and returns how it ended; see Runner.Run. It
// resolves the interpreter each time: to run more than one program, use a Runner.
func Run(ctx context.Context, p Program) (Result, error) {
	r, err := newRunner(ctx, RunnerOptions{}, false)
	if err != nil {
		return Result{}, err
	}
	defer r.Close()
	return r.Run(ctx, p)
}

// ResultJSON is res as one JSON object, as kiln run --json prints it and the daemon
// answers a program: {"status","value","logs","error","wallSeconds","cpuSeconds",
// "exitCode","signal"}, the value exact.
func ResultJSON(res Result) []byte {
	var value, errText lossless.Value
	if res.Status == RunOK {
		value = res.Value
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
	return lossless.Encode(lossless.NewObject(
		lossless.Member{Key: "status", Value: lossless.String(res.Status)},
		lossless.Member{Key: "value", Value: value},
		lossless.Member{Key: "logs", Value: logs},
		lossless.Member{Key: "error", Value: errText},
		lossless.Member{Key: "wallSeconds", Value: lossless.Number(res.Wall.Milliseconds()) / 1000},
		lossless.Member{Key: "cpuSeconds", Value: lossless.Number(res.CPU.Milliseconds()) / 1000},
		lossless.Member{Key: "exitCode", Value: exitCode},
		lossless.Member{Key: "signal", Value: sig},
	))
}
