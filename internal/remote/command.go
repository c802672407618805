package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kilnrt/kiln/internal/proc"
)

// CommandGrace is how long a command whose connection closed has to exit before its
// process group is killed.
const CommandGrace = time.Second

// commandTail bounds what is kept of a command's standard error, for its errors.
const commandTail = 2 << 10

// commandError is a command that ended its connection by failing: how it exited and
// the end of what it wrote on standard error.
type commandError struct {
	argv0  string
	state  string
	stderr string
}

func (e *commandError) Error() string {
	msg := fmt.Sprintf("the command %s ended (%s)", e.argv0, e.state)
	if e.stderr != "" {
		msg += ": " + strings.TrimSpace(e.stderr)
	}
	return msg
}

// commandConn is a connection over a command's standard input and output: one HTTP
// connection, one process, the leader of its own group, killed when the host dies.
type commandConn struct {
	argv0  string
	cmd    *exec.Cmd
	in     *os.File // the command's standard input, written
	out    *os.File // its standard output, read
	stderr *proc.Tail
	done   chan struct{} // closed once the command is reaped
	once   sync.Once
}

// dialCommand starts argv and returns the connection over its standard input and
// output.
func dialCommand(ctx context.Context, argv []string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("remote: command: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("remote: command: %w", err)
	}
	c := &commandConn{argv0: argv[0], in: inW, out: outR, stderr: proc.NewTail(commandTail), done: make(chan struct{})}
	c.cmd = exec.Command(argv[0], argv[1:]...)
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = inR, outW, c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = c.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, &commandError{argv0: argv[0], state: "not started: " + err.Error()}
	}
	go func() {
		c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Read reads the command's output. At its end, a command that failed says so, with its
// standard error.
func (c *commandConn) Read(p []byte) (int, error) {
	n, err := c.out.Read(p)
	if errors.Is(err, io.EOF) {
		t := time.NewTimer(CommandGrace)
		defer t.Stop()
		select {
		case <-c.done:
			if st := c.cmd.ProcessState; st != nil && !st.Success() {
				return n, &commandError{argv0: c.argv0, state: st.String(), stderr: c.stderr.String()}
			}
		case <-t.C:
		}
	}
	return n, err
}

func (c *commandConn) Write(p []byte) (int, error) { return c.in.Write(p) }

// Close closes the command's input and output, lets it exit within CommandGrace, then
// kills it, and returns once it is reaped.
func (c *commandConn) Close() error {
	c.once.Do(func() {
		c.in.Close()
		c.out.Close()
		t := time.NewTimer(CommandGrace)
		defer t.Stop()
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.cmd.Process.Kill() // through its pidfd: never a process that took over its id
		<-c.done
	})
	return nil
}

func (c *commandConn) LocalAddr() net.Addr  { return commandAddr(c.argv0) }
func (c *commandConn) RemoteAddr() net.Addr { return commandAddr(c.argv0) }

func (c *commandConn) SetDeadline(t time.Time) error {
	return errors.Join(c.in.SetWriteDeadline(t), c.out.SetReadDeadline(t))
}
func (c *commandConn) SetReadDeadline(t time.Time) error  { return c.out.SetReadDeadline(t) }
func (c *commandConn) SetWriteDeadline(t time.Time) error { return c.in.SetWriteDeadline(t) }

// commandAddr names a command as a connection's address.
type commandAddr string

func (a commandAddr) Network() string { return "exec" }
func (a commandAddr) String() string  { return string(a) }
