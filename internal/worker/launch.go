package worker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/scratch"
	"github.com/kilnrt/kiln/internal/zygote"
	"github.com/kilnrt/kiln/python"
)

// Forker forks a generation's process from one that has the worker loaded
// (internal/zygote's Pool). An error means it did not: the generation is spawned.
type Forker interface {
	Fork(ctx context.Context, r zygote.Request) (*proc.Process, sandbox.Applied, error)
}

// launch starts the generation's process c, running module with args: forked when
// cfg.Forker can, spawned otherwise; w.proc and w.confined say which, and why not
// forked. It returns the host's end of the control socket, connected, and the deadline
// of the hello.
func (w *Worker) launch(ctx context.Context, module string, args []string, c proc.Command) (*net.UnixConn, time.Time, error) {
	notForked := ""
	if w.cfg.Forker != nil {
		conn, err := w.fork(ctx, module, args, c)
		if err == nil {
			return conn, time.Now().Add(w.cfg.StartTimeout), nil
		}
		if ctx.Err() != nil {
			return nil, time.Time{}, ctx.Err()
		}
		notForked = err.Error()
		w.log.Info("the generation is spawned, not forked", "err", err)
	}
	return w.spawn(ctx, module, args, c, notForked)
}

// fork forks the generation from its zygote, which has the package imported already.
// What a spawned worker finds in its directory reaches a forked one through
// descriptors, so that a fork makes no file: its end of the control socket, a socket
// pair's (--socket-fd), and pipes of the skills (--skills-fd) and of the tool catalog
// (--tools-fd), each read to its end.
func (w *Worker) fork(ctx context.Context, module string, args []string, c proc.Command) (*net.UnixConn, error) {
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "control"), os.NewFile(uintptr(pair[1]), "control (child)")
	handed := []*os.File{theirs} // the child's fds 3, 4, …; this process's copies are closed once it has them
	defer func() {
		for _, f := range handed {
			f.Close()
		}
	}()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	args = append([]string{"--socket-fd", "3"}, args...)
	for _, in := range [...]struct {
		option string
		data   []byte
	}{{"--skills-fd", w.cfg.Skills}, {"--tools-fd", w.cfg.Tools}} {
		if in.data == nil {
			continue
		}
		r, pw, err := os.Pipe()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("pipe: %w", err)
		}
		args = append(args, in.option, strconv.Itoa(3+len(handed)))
		handed = append(handed, r)
		go func() {
			pw.Write(in.data) // the child reads it to its end; no child, or one that died, fails it
			pw.Close()
		}()
	}
	c.ExtraFiles = handed
	args = withFront(&c, args)
	p, applied, err := w.cfg.Forker.Fork(ctx, zygote.Request{Python: w.cfg.Python, Package: w.cfg.Package,
		Module: module, Args: args, Command: c, Sandbox: policyOf(w.cfg, ""), Host: w.cfg.SandboxHost})
	if err != nil {
		conn.Close()
		return nil, err
	}
	applied.Start = sandbox.StartForked
	w.proc, w.confined = p, applied
	return conn.(*net.UnixConn), nil
}

// spawn executes python for the generation, confined by its sandbox's helper, in a
// directory of its own: the package is installed there, the skills and the tool catalog
// are files there (--skills, --tools, which the worker reads and removes), and the
// worker connects to the control socket there (--socket).
func (w *Worker) spawn(ctx context.Context, module string, args []string, c proc.Command, notForked string) (*net.UnixConn, time.Time, error) {
	var err error
	if w.dir, err = scratch.Make(scratch.Worker); err != nil {
		return nil, time.Time{}, err
	}
	socket := filepath.Join(w.dir, "control.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	ln.SetUnlinkOnClose(true)
	args = append([]string{"--socket", socket}, args...)
	for _, in := range [...]struct {
		option, name, what string
		data               []byte
	}{{"--skills", "skills.json", "skills", w.cfg.Skills}, {"--tools", "tools.json", "tools", w.cfg.Tools}} {
		if in.data == nil {
			continue
		}
		path := filepath.Join(w.dir, in.name)
		if err := os.WriteFile(path, in.data, 0o600); err != nil {
			return nil, time.Time{}, fmt.Errorf("materializing the %s: %w", in.what, err)
		}
		args = append(args, in.option, path)
	}
	if err := w.cfg.Package.Install(w.dir); err != nil {
		return nil, time.Time{}, err
	}
	args = withFront(&c, args)
	c.Args = python.Args(w.dir, module, args...)
	p, applied, err := w.cfg.SandboxHost.Start(ctx, policyOf(w.cfg, w.dir), c)
	applied.Start, applied.NotForked = sandbox.StartSpawned, notForked
	w.proc, w.confined = p, applied
	if err != nil {
		return nil, time.Time{}, err
	}
	deadline := time.Now().Add(w.cfg.StartTimeout)
	conn, err := w.accept(ctx, ln, deadline)
	if err != nil {
		return nil, time.Time{}, err
	}
	return conn, deadline, nil
}

// withFront hands c's Front, if it has one, to the child as its last descriptor, and
// returns args with the option that names it (--status-fd).
func withFront(c *proc.Command, args []string) []string {
	if c.Front == nil {
		return args
	}
	args = append(args, "--status-fd", strconv.Itoa(3+len(c.ExtraFiles)))
	c.ExtraFiles = append(slices.Clip(c.ExtraFiles), c.Front.File())
	return args
}
