// Package workspace serves workspace.info and workspace.run: commands an agent runs in
// its workspace. A command's working directory must stay inside the workspace root — no
// escape through ".." or a symlink, judged by os.Root and entered through the very
// directory handle that was judged. It runs in its own process group, killed whole at its
// timeout; its stdout and stderr are kept up to a byte budget they share, and what is
// discarded is counted exactly.
package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// Methods this package serves.
const (
	InfoMethod = "workspace.info"
	RunMethod  = "workspace.run"
)

// Limits of workspace.run.
const (
	// DefaultMaxOutputBytes is the output budget when a request names none; it is also
	// the largest a request may name, so that a reply fits in one frame.
	DefaultMaxOutputBytes = 750000
	MaxOutputBytes        = DefaultMaxOutputBytes
	// DefaultTimeout is a command's timeout when a request names none.
	DefaultTimeout = 120 * time.Second
	// MaxTimeout is the longest timeout a request may name.
	MaxTimeout = time.Hour
	// MaxArgs bounds argv's length.
	MaxArgs = 4096
	// drainGrace bounds the wait for the output pipes after the group is gone, in case a
	// process that left the group holds them.
	drainGrace = time.Second
	// replyMargin is kept free in a reply frame for the envelope and the other fields.
	replyMargin = 64 << 10
)

// Service serves both methods for one workspace root.
type Service struct {
	Root string   // absolute
	Env  []string // the environment commands start from; nil means the host's
	// Sandbox confines each command under SandboxHost's mechanisms, in a PID namespace
	// of its own, with Root as its writable directory. A zero Sandbox confines nothing.
	Sandbox     sandbox.Policy
	SandboxHost *sandbox.Host
}

// Info is workspace.info's service.
func (s *Service) Info() host.Service {
	return host.ServiceFunc(func(_ context.Context, req *host.Request) host.Outcome {
		var p struct{}
		if err := req.Decode(&p); err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "workspace.info takes no parameters: %v", err))
		}
		return host.Reply(host.OK(map[string]any{
			"root":                     s.Root,
			"default_timeout_ms":       DefaultTimeout.Milliseconds(),
			"max_timeout_ms":           MaxTimeout.Milliseconds(),
			"default_max_output_bytes": DefaultMaxOutputBytes,
			"max_output_bytes":         MaxOutputBytes,
			"process_group":            true,
			"timeout_signal":           "SIGKILL",
		}))
	})
}

// runParams are workspace.run's fields.
type runParams struct {
	Argv           []string          `json:"argv"`
	Cwd            *string           `json:"cwd"`
	Env            map[string]string `json:"env"`
	TimeoutMS      *int64            `json:"timeout_ms"`
	MaxOutputBytes *int64            `json:"max_output_bytes"`
}

// Result is workspace.run's reply value, and its effect's receipt.
type Result struct {
	ExitCode        *int   `json:"exit_code"` // null when a signal ended it
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out"`
	Cancelled       bool   `json:"cancelled,omitempty"` // its cell's scope ended first
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutBytes     int64  `json:"stdout_bytes"` // what the command wrote, in all
	StderrBytes     int64  `json:"stderr_bytes"`
	StdoutTruncated int64  `json:"stdout_truncated_bytes"` // of which discarded
	StderrTruncated int64  `json:"stderr_truncated_bytes"`
	DurationMS      int64  `json:"duration_ms"`
	Cwd             string `json:"cwd"` // relative to the root
}

// Run is workspace.run's service.
func (s *Service) Run() host.Service {
	return host.ServiceFunc(s.run)
}

func refuse(format string, args ...any) host.Outcome {
	return host.Reply(host.Error(host.CodeInvalidRequest, format, args...))
}

func (s *Service) run(ctx context.Context, req *host.Request) host.Outcome {
	var p runParams
	if err := req.Decode(&p); err != nil {
		return refuse("workspace.run takes argv, cwd, env, timeout_ms, max_output_bytes: %v", err)
	}
	if len(p.Argv) == 0 || len(p.Argv) > MaxArgs {
		return refuse("argv must hold 1..%d strings", MaxArgs)
	}
	for _, a := range p.Argv {
		if strings.ContainsRune(a, 0) {
			return refuse("argv must not contain NUL")
		}
	}
	timeout := DefaultTimeout
	if p.TimeoutMS != nil {
		if *p.TimeoutMS <= 0 || *p.TimeoutMS > MaxTimeout.Milliseconds() {
			return refuse("timeout_ms must be 1..%d", MaxTimeout.Milliseconds())
		}
		timeout = time.Duration(*p.TimeoutMS) * time.Millisecond
	}
	budget := int64(DefaultMaxOutputBytes)
	if p.MaxOutputBytes != nil {
		if *p.MaxOutputBytes < 0 || *p.MaxOutputBytes > MaxOutputBytes {
			return refuse("max_output_bytes must be 0..%d", MaxOutputBytes)
		}
		budget = *p.MaxOutputBytes
	}
	env := s.Env
	if env == nil {
		env = os.Environ()
	}
	env = append([]string(nil), env...)
	for k, v := range p.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return refuse("env names must be non-empty without '=' or NUL, and values without NUL")
		}
		env = append(env, k+"="+v)
	}
	cwd := "."
	if p.Cwd != nil {
		cwd = *p.Cwd
	}
	dir, rel, err := s.openDir(cwd)
	if err != nil {
		return refuse("cwd %q: %v", cwd, err)
	}
	defer dir.Close()

	var effect int64
	detail := map[string]any{"argv": p.Argv, "cwd": rel, "env": p.Env, "timeout_ms": timeout.Milliseconds(), "max_output_bytes": budget}
	if err := req.Record(ctx, func(tx *store.Tx) error {
		var err error
		effect, err = tx.StartEffect(req.Session.ID, req.ID(), RunMethod, detail)
		return err
	}); err != nil {
		return host.Reply(host.Error(host.CodeStoreFailed, "the host could not record the command before running it: %v", err))
	}
	res := s.execute(ctx, p.Argv, env, dir, rel, timeout, budget)
	return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
		if err := tx.FinishEffect(req.Session.ID, effect, res); err != nil {
			return wire.Reply{}, err
		}
		return host.OK(res), nil
	}}
}

// openDir opens cwd inside the root, refusing any path that leaves it.
func (s *Service) openDir(cwd string) (*os.File, string, error) {
	rel := cwd
	if filepath.IsAbs(cwd) {
		r, err := filepath.Rel(s.Root, cwd)
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return nil, "", errors.New("outside the workspace")
		}
		rel = r
	}
	root, err := os.OpenRoot(s.Root)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	dir, err := root.Open(rel)
	if err != nil {
		if strings.Contains(err.Error(), "escapes") {
			return nil, "", errors.New("outside the workspace")
		}
		return nil, "", err
	}
	if fi, err := dir.Stat(); err != nil || !fi.IsDir() {
		dir.Close()
		return nil, "", errors.New("not a directory")
	}
	return dir, filepath.Clean(rel), nil
}

// execute runs argv in dir and returns what became of it.
func (s *Service) execute(ctx context.Context, argv, env []string, dir *os.File, rel string, timeout time.Duration, budget int64) Result {
	res := Result{Cwd: rel}
	out := newCapture(budget)
	start := time.Now()
	// The child enters the directory through the handle that was judged: the child
	// changes directory after fork, before exec, while it still holds the host's
	// descriptors, so /proc/self/fd/N names that very directory, and no rename or symlink
	// swapped in after the check can move it elsewhere.
	// It is init of its own PID namespace, confined or not, so that the kernel ends
	// every process it starts, by any route, with it, and with the host when the host
	// dies: a cgroup's kill needs a living host.
	pol := s.Sandbox
	pol.Work = cmp.Or(pol.Work, s.Root)
	pol.Cwd = filepath.Join(s.Root, rel)
	cmd := proc.Command{
		Path:   argv[0],
		Args:   argv[1:],
		Env:    env,
		Dir:    "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())),
		Stdout: out.stream(0),
		Stderr: out.stream(1),
		// As a cell's processes: every process the command starts, by any route, ends
		// when it does, and with the host.
		Contain: true,
	}
	var p *proc.Process
	var err error
	if pol.Profile.Confines() {
		p, _, err = s.SandboxHost.Start(ctx, pol, cmd)
	} else {
		// No cgroup: the memory limit is each process's address space, as the worker's.
		p, err = sandbox.StartLimited(ctx, pol.MemoryBytes, cmd)
	}
	if err != nil {
		code := 127
		res.ExitCode = &code
		res.Stderr = fmt.Sprintf("kiln: cannot start %q: %v", argv[0], err)
		res.StderrBytes = int64(len(res.Stderr))
		return res
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.Exited():
	case <-timer.C:
		res.TimedOut = true
		p.Kill()
	case <-ctx.Done():
		res.Cancelled = true
		p.Kill()
	}
	<-p.Exited()
	p.Kill() // members that stayed in the group
	p.Release(drainGrace)
	res.DurationMS = time.Since(start).Milliseconds()
	if st := p.State(); st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = signalName(ws.Signal())
		} else {
			code := st.ExitCode()
			res.ExitCode = &code
		}
	}
	out.fill(&res, wire.MaxFrameSize-replyMargin)
	return res
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return "signal " + strconv.Itoa(int(sig))
}
