package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kilnrt/kiln"
	"github.com/spf13/cobra"
)

// maxReadFileBytes caps what kiln.read_file returns.
const maxReadFileBytes = 16 << 20

// maxListEntries caps the entries kiln.list_dir returns: a directory of millions would
// otherwise be read, and its reply built, whole.
const maxListEntries = 50_000

// defaultMemoryLimit is the Go memory limit of kiln run with the default budgets.
const defaultMemoryLimit = 256 << 20

// maxCallsAtOnce is how many calls of the kiln namespace run at once; the others wait
// their turn, which a call holds until its reply is queued: so the files in memory
// stay within a few times maxReadFileBytes, however many calls a program makes.
const maxCallsAtOnce = 1

// runFlags are kiln run's options.
type runFlags struct {
	asJSON        bool
	timeout       time.Duration
	cpuSeconds    int
	memory        string
	maxLogBytes   int
	maxValueBytes int
	maxProcesses  int
	python        string
	mcp           []string
	toolTimeout   time.Duration
	record        dataFlags // --data and --session: where the run is recorded
}

func newRun() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Annotations: oneThread,
		Use:         "run [--json] [--timeout D] [--cpu-seconds N] [--memory BYTES] [--max-log-bytes N] [--max-value-bytes N] FILE|-",
		Short:       "Run a Python program once, in a fresh child, and show its result",
		Long: `Run the Python program in FILE (or standard input, for -) once, in a fresh python3 -I -S
child, and show how it ended. The program is the body of an async function: it may
await, and "return v" ends it with v as its value, which must be lossless JSON (no
NaN, infinities, -0, sets, tuples or non-string keys). Falling off the end returns
null. print() and writes to stdout and stderr are its logs.

The program can call one namespace of host functions, kiln, confined to the working
directory; a path that leaves it, also through a symbolic link, is refused, and the
call raises KilnError. Links are followed as Linux follows them, up to 40 in a chain:

  await kiln.read_file("notes.txt")     the file's text (UTF-8, at most 16 MiB)
  await kiln.list_dir("src")            its entries, by name: [{"name", "type", "size"}]
                                        (type is file, dir, symlink or other; at most 50,000)

Either takes a path, or path=...; list_dir with no argument lists ".".

--mcp NAME=COMMAND (or NAME=URL) adds an MCP server's tools as the global NAME, called
as in cells: await NAME.<tool>(a=1, b="x"), keyword arguments (or one dict of them,
await NAME.<tool>({"a": 1}); not both); a failed call raises ToolError (docs/tools.md).

--session NAME records the run in that durable session (made if absent) of the data
directory (--data): the program, how it ended, and each --mcp tool call with its
reply, as kiln log shows them. Without it nothing is recorded.

Limits: --timeout is the wall clock (default 10m), --cpu-seconds the CPU time (60),
--memory the address space (512MiB), --max-log-bytes the logs as a JSON array (65536;
past it the logs end with "[kiln] log capture truncated at N bytes"),
--max-value-bytes the value as JSON (32768) and --max-processes the processes and
threads it may start beyond those its user has (64; the kernel does not hold root to
it). Ctrl-C, SIGTERM and SIGHUP abort the run: its result is shown all the same.

What is isolated: only the kiln bindings are confined to the working directory. The
program itself runs as your user, with your user's access: it can read and write any
file you can, start processes (up to --max-processes) and open network connections.
kiln bounds what it sends back and what it costs the host, not what it does; this is
not a sandbox.

Output: the logs on stdout, one per line, then the value as JSON unless it is null.
A run that did not end ok shows its error on stderr and a line "[kiln] run STATUS",
STATUS one of exception, invalid-output, output-limit, timeout, abort, worker-exit.
With --json, one JSON object instead: {"status","value","logs","error","wall_ms",
"cpu_ms","exit_code","signal"}: the wall-clock and CPU time in whole milliseconds, and
exit_code and signal saying how python ended when that ended the run (else null).

Exit status: 0 when the run ended ok, 1 otherwise, 2 for usage errors.`,
		Example: `  kiln run prog.py
  echo 'return sum(range(10))' | kiln run -
  echo 'return await kiln.list_dir()' | kiln run --json -
  kiln run --timeout 5s --cpu-seconds 2 --memory 256MiB prog.py`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			limits, err := f.limits()
			if err != nil {
				return usageError{err}
			}
			src, err := readProgram(cmd.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			servers, err := mcpServers(f.mcp, f.toolTimeout)
			if err != nil {
				return err
			}
			record, err := f.openRecord(cmd.Context())
			if err != nil {
				return err
			}
			if record != nil {
				defer record.Close()
			}
			tools, err := kiln.OpenToolset(cmd.Context(), kiln.ToolsetOptions{MCP: servers, Timeout: f.toolTimeout})
			if err != nil {
				return err
			}
			defer tools.Close()
			python := spareWrapper(cmd.Context(), cmd.ErrOrStderr(), f.python, f.asJSON)
			ropts := kiln.RunnerOptions{Python: python, Sandbox: f.record.sandbox, Network: f.record.network}
			return runProgram(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), src, limits, f.asJSON, ropts, tools, record)
		},
	}
	fl := cmd.Flags()
	addJSON(cmd, &f.asJSON, `print one JSON object: {"status","value","logs","error","wall_ms","cpu_ms","exit_code","signal"}`)
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit (e.g. 30s); 0 means the default, 10m")
	fl.IntVar(&f.cpuSeconds, "cpu-seconds", 0, "CPU time limit in seconds; 0 means the default, 60")
	fl.StringVar(&f.memory, "memory", "", "address-space limit in bytes, or with a suffix K, M, G, T (KiB, MiB, GiB, TiB); default 512MiB")
	fl.IntVar(&f.maxLogBytes, "max-log-bytes", 0, "log budget in bytes; 0 means the default, 65536")
	fl.IntVar(&f.maxValueBytes, "max-value-bytes", 0, "budget of the value's JSON in bytes; 0 means the default, 32768")
	fl.IntVar(&f.maxProcesses, "max-processes", 0, "processes and threads the program may start beyond its user's; 0 means the default, 64")
	addPython(cmd, &f.python)
	addTools(cmd, &f.mcp, &f.toolTimeout)
	addSandbox(cmd, &f.record.sandbox, &f.record.network)
	f.record.addData(cmd)
	fl.StringVar(&f.record.session, "session", "", "record the run and its tool calls in the durable session NAME (made if absent)")
	return cmd
}

// openRecord opens the session --session names to record the run in; nil without it.
func (f runFlags) openRecord(ctx context.Context) (*kiln.ProgramLog, error) {
	if f.record.session == "" {
		if f.record.data != "" {
			return nil, usageError{errors.New("--data is where --session records the run: give --session too")}
		}
		return nil, nil
	}
	name, err := f.record.sessionName()
	if err != nil {
		return nil, err
	}
	dir, err := f.record.dataDir()
	if err != nil {
		return nil, err
	}
	return kiln.OpenProgramLog(ctx, dir, name)
}

// limits checks the flags and turns them into Limits.
func (f runFlags) limits() (kiln.Limits, error) {
	switch {
	case f.timeout < 0:
		return kiln.Limits{}, fmt.Errorf("--timeout must not be negative, got %s", f.timeout)
	case f.cpuSeconds < 0:
		return kiln.Limits{}, fmt.Errorf("--cpu-seconds must not be negative, got %d", f.cpuSeconds)
	case f.maxLogBytes < 0:
		return kiln.Limits{}, fmt.Errorf("--max-log-bytes must not be negative, got %d", f.maxLogBytes)
	case f.maxValueBytes < 0:
		return kiln.Limits{}, fmt.Errorf("--max-value-bytes must not be negative, got %d", f.maxValueBytes)
	case f.maxProcesses < 0:
		return kiln.Limits{}, fmt.Errorf("--max-processes must not be negative, got %d", f.maxProcesses)
	}
	var memory int64
	if f.memory != "" {
		var err error
		if memory, err = parseBytes(f.memory); err != nil {
			return kiln.Limits{}, fmt.Errorf("--memory: %w", err)
		}
	}
	return kiln.Limits{
		CPUSeconds:        f.cpuSeconds,
		Wall:              f.timeout,
		AddressSpaceBytes: memory,
		MaxLogBytes:       f.maxLogBytes,
		MaxValueBytes:     f.maxValueBytes,
		MaxProcesses:      f.maxProcesses,
	}, nil
}

// flagNames says an invalid program's limits in kiln run's flags, not the Go fields.
var flagNames = strings.NewReplacer(
	"AddressSpaceBytes", "--memory", "CPUSeconds", "--cpu-seconds", "Wall", "--timeout",
	"MaxLogBytes", "--max-log-bytes", "MaxValueBytes", "--max-value-bytes", "MaxProcesses", "--max-processes",
)

// A byteUnit is a suffix parseBytes takes: a power of 1024.
type byteUnit struct {
	name  string
	shift uint
}

// byteUnits are the suffixes parseBytes takes, as the help lists them.
var byteUnits = []byteUnit{{"", 0}, {"B", 0}, {"K", 10}, {"KiB", 10}, {"M", 20}, {"MiB", 20}, {"G", 30}, {"GiB", 30}, {"T", 40}, {"TiB", 40}}

// parseBytes reads a positive byte count: digits, then optionally one of byteUnits,
// in any case.
func parseBytes(s string) (int64, error) {
	digits := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.TrimSpace(s[len(digits):])
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive number of bytes (like 268435456 or 256MiB)", s)
	}
	i := slices.IndexFunc(byteUnits, func(u byteUnit) bool { return strings.EqualFold(u.name, unit) })
	if i < 0 {
		names := make([]string, 0, len(byteUnits))
		for _, u := range byteUnits[1:] {
			names = append(names, u.name)
		}
		return 0, fmt.Errorf("%q: the unit %q is not one of %s", s, unit, strings.Join(names, ", "))
	}
	if shift := byteUnits[i].shift; n <= (1<<62)>>shift {
		return n << shift, nil
	}
	return 0, fmt.Errorf("%q is more than 2^62 bytes", s)
}

// readProgram reads the program from name, or standard input for "-".
func readProgram(stdin io.Reader, name string) (string, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return "", fmt.Errorf("reading the program: %w", err)
	}
	return string(data), nil
}

// runWith runs p with the interpreter python; when record is not nil, recorded there
// with the tools of tools (which p's namespaces then leave out).
func runWith(ctx context.Context, opts kiln.RunnerOptions, p kiln.Program, tools *kiln.Toolset, record *kiln.ProgramLog) (kiln.Result, error) {
	runner, err := kiln.NewRunner(ctx, opts)
	if err != nil {
		return kiln.Result{}, err
	}
	defer runner.Close()
	if record != nil {
		return record.Run(ctx, runner, p, tools)
	}
	return runner.Run(ctx, p)
}

// runProgram runs src with the kiln namespace and the tools of tools, in the working
// directory, recorded in record unless it is nil, and shows how it ended.
func runProgram(ctx context.Context, stdout, stderr io.Writer, src string, limits kiln.Limits, asJSON bool, opts kiln.RunnerOptions, tools *kiln.Toolset, record *kiln.ProgramLog) error {
	root, err := openWorkDir(".")
	if err != nil {
		return err
	}
	defer root.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if limits.MaxLogBytes == 0 && limits.MaxValueBytes == 0 {
		// With the default budgets what a program can make the host hold is well within
		// this (docs/programs.md): the collector works harder near it instead of letting
		// garbage double the heap.
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	prog := kiln.Program{Source: src, Namespaces: []kiln.Namespace{fileNamespace(root)}, Limits: limits}
	if record == nil {
		prog.Namespaces = append(prog.Namespaces, tools.Namespaces()...)
	}
	res, err := runWith(ctx, opts, prog, tools, record)
	if errors.Is(err, kiln.ErrInvalidProgram) {
		return usageError{errors.New(flagNames.Replace(err.Error()))}
	}
	if err != nil {
		return err
	}
	if asJSON {
		line, err := res.MarshalJSON()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", line)
	} else {
		renderResult(stdout, stderr, res)
	}
	if res.Status != kiln.RunOK {
		return errNotOK
	}
	return nil
}

// renderResult shows a run to a person: logs and value on stdout, what went wrong on
// stderr.
func renderResult(stdout, stderr io.Writer, res kiln.Result) {
	for _, l := range res.Logs {
		fmt.Fprintln(stdout, l)
	}
	if res.Status == kiln.RunOK {
		if res.Value != nil {
			// A run's value is always one: DecodeValue made it.
			text, _ := kiln.EncodeValue(res.Value)
			fmt.Fprintf(stdout, "%s\n", text)
		}
		return
	}
	if res.Error != "" {
		io.WriteString(stderr, res.Error)
		if !strings.HasSuffix(res.Error, "\n") {
			io.WriteString(stderr, "\n")
		}
	}
	fmt.Fprintf(stderr, "[kiln] run %s\n", res.Status)
}

// fileNamespace is the kiln namespace: read_file and list_dir, within root.
func fileNamespace(root *workDir) kiln.Namespace {
	return kiln.Namespace{
		Global:        "kiln",
		ErrorClass:    &kiln.ErrorClass{Name: "KilnError", MemberNameProperty: "member"},
		MaxConcurrent: maxCallsAtOnce,
		Funcs: map[string]kiln.Func{
			"read_file": func(_ context.Context, args kiln.Value) (kiln.Value, error) {
				path, err := pathArg(args, false)
				if err != nil {
					return nil, err
				}
				return readFile(root, path)
			},
			"list_dir": func(_ context.Context, args kiln.Value) (kiln.Value, error) {
				path, err := pathArg(args, true)
				if err != nil {
					return nil, err
				}
				return listDir(root, path)
			},
		},
	}
}

// pathArg takes a binding's path: a string, or an object with a string "path"; with
// orDot, none means ".".
func pathArg(args kiln.Value, orDot bool) (string, error) {
	if o, ok := args.(kiln.Object); ok {
		args, _ = o.Get("path")
	}
	switch p := args.(type) {
	case kiln.String:
		if p == "" {
			return "", errors.New("the path is empty")
		}
		return string(p), nil
	case nil:
		if orDot {
			return ".", nil
		}
	}
	return "", errors.New(`want a path: a string, or {"path": string}`)
}

// readFile returns the text of path, within root: a regular file's.
func readFile(root *workDir, path string) (kiln.Value, error) {
	f, err := openWithin(root, path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var size int64
	if info, err := f.Stat(); err == nil {
		size = min(info.Size(), maxReadFileBytes) + 1 // what it holds, read in one buffer
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err = buf.ReadFrom(io.LimitReader(f, maxReadFileBytes+1))
	data := buf.Bytes()
	switch {
	case err != nil:
		return nil, fileError(path, err)
	case len(data) > maxReadFileBytes:
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxReadFileBytes)
	case !utf8.Valid(data):
		return nil, fmt.Errorf("%s is not UTF-8 text", path)
	}
	return kiln.String(data), nil
}

// listDir returns the entries of the directory path, within root, by name.
func listDir(root *workDir, path string) (kiln.Value, error) {
	f, err := openWithin(root, path, true)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var entries []fs.DirEntry
	for {
		batch, err := f.ReadDir(1024)
		entries = append(entries, batch...)
		if len(entries) > maxListEntries {
			return nil, fmt.Errorf("%s has more than %d entries", path, maxListEntries)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fileError(path, err)
		}
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	out := make(kiln.Array, 0, len(entries))
	for _, e := range entries {
		kind := "other"
		switch t := e.Type(); {
		case t.IsRegular():
			kind = "file"
		case t.IsDir():
			kind = "dir"
		case t&fs.ModeSymlink != 0:
			kind = "symlink"
		}
		var size int64
		if kind == "file" {
			size = entrySize(f, e.Name())
		}
		out = append(out, kiln.NewObject(
			kiln.Member{Key: "name", Value: kiln.String(strings.ToValidUTF8(e.Name(), "\ufffd"))},
			kiln.Member{Key: "type", Value: kiln.String(kind)},
			kiln.Member{Key: "size", Value: kiln.Number(size)},
		))
	}
	return out, nil
}

// openWithin opens path, within root, without blocking (a FIFO or a device would
// block an open or a read for as long as the program likes) and returns it if the
// opened descriptor is a directory (dir) or a regular file (!dir), else an error.
func openWithin(root *workDir, path string, dir bool) (*os.File, error) {
	f, err := root.open(path)
	if err != nil {
		return nil, fileError(path, err)
	}
	info, err := f.Stat()
	switch {
	case err != nil:
		err = fileError(path, err)
	case dir && !info.IsDir():
		err = fmt.Errorf("%s is not a directory", path)
	case !dir && info.IsDir():
		err = fmt.Errorf("%s is a directory", path)
	case !dir && !info.Mode().IsRegular():
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// fileError says what went wrong with path in the program's terms, without the
// host's own paths.
func fileError(path string, err error) error {
	switch {
	case strings.Contains(err.Error(), "path escapes from parent"):
		return fmt.Errorf("%s is outside the working directory", path)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist", path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied", path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", path, pe.Err)
	}
	return fmt.Errorf("%s: %v", path, err)
}
