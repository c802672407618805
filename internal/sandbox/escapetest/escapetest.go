// Package escapetest is the escape suite of kiln's sandbox: a world a hostile child
// aims at, and Python code that tries each escape. internal/sandbox runs it against
// spawned children, internal/zygote against forked workers.
package escapetest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// World is what a hostile child aims at: a home directory with a secret, a data
// directory with a record and a daemon's socket, a directory outside the workspace,
// a TCP server on loopback, and a process of the host's that is not the child's.
type World struct {
	Home, Data, Work, Outside string
	TCP                       int
	Victim                    *os.Process
	Accepted                  chan struct{} // a connection reached the daemon's socket
}

// NewWorld makes a World that ends with the test; it sets HOME.
func NewWorld(t *testing.T) *World {
	t.Helper()
	w := &World{Home: t.TempDir(), Data: t.TempDir(), Work: t.TempDir(), Outside: t.TempDir(), Accepted: make(chan struct{}, 16)}
	t.Setenv("HOME", w.Home)
	os.WriteFile(filepath.Join(w.Home, "secret"), []byte("home secret"), 0o600)
	os.WriteFile(filepath.Join(w.Data, "kiln.db"), []byte("the record"), 0o600)
	ln, err := net.Listen("unix", filepath.Join(w.Data, "kiln.sock"))
	if err != nil {
		t.Fatal(err)
	}
	acceptAll(t, ln, func() { w.Accepted <- struct{}{} })
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acceptAll(t, tl, func() {})
	w.TCP = tl.Addr().(*net.TCPAddr).Port
	// A descriptor this process holds without close-on-exec, as a daemon inherits one
	// from whatever started it.
	f, err := os.Create(filepath.Join(w.Outside, "inherited"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup3(int(f.Fd()), InheritedFD, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { unix.Close(InheritedFD) })
	victim := exec.Command("sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	w.Victim = victim.Process
	return w
}

// InheritedFD is the descriptor of a World's process that is not close-on-exec: a
// child must not hold it.
const InheritedFD = 300

// acceptAll accepts and closes every connection to ln, calling seen for each, until
// the test ends.
func acceptAll(t *testing.T, ln net.Listener, seen func()) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			seen()
			c.Close()
		}
	}()
}

// Attempt is Python code that tries one escape and prints "escaped" if it worked, or
// "refused: <why>".
type Attempt struct {
	Name string
	Code string
	// StrictOnly: refused under strict, allowed under workspace (its default network).
	StrictOnly bool
}

// Preamble defines try_(), which runs an escape and reports it, and libc for calls the
// standard library has no wrapper for.
const Preamble = `import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def check(r):
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def try_(f):
    try:
        f()
    except Exception as e:
        print("refused:", type(e).__name__, e, flush=True)
    else:
        print("escaped", flush=True)
`

// Attempts are the escapes, for a child of the host process host.
func (w *World) Attempts(host int) []Attempt {
	ptrace := fmt.Sprintf(`def f():
    check(libc.ptrace(16, %d, 0, 0))  # PTRACE_ATTACH
    os.waitpid(%[1]d, 0)
    libc.ptrace(17, %[1]d, 0, 0)  # PTRACE_DETACH
try_(f)`, w.Victim.Pid)
	getfd := fmt.Sprintf(`def f():
    pidfd = os.pidfd_open(%d)
    check(libc.syscall(438, pidfd, 1, 0))  # pidfd_getfd of its stdout
try_(f)`, w.Victim.Pid)
	mount := fmt.Sprintf(`def f():
    check(libc.mount(b"none", %q.encode(), b"tmpfs", 0, None))
    libc.umount2(%[1]q.encode(), 0)
try_(f)`, w.Outside)
	attempts := []Attempt{
		{Name: "read home", Code: fmt.Sprintf("try_(lambda: open(%q).read())", filepath.Join(w.Home, "secret"))},
		{Name: "write outside", Code: fmt.Sprintf("try_(lambda: open(%q, 'w').write('x'))", filepath.Join(w.Outside, "planted"))},
		{Name: "open record", Code: fmt.Sprintf("try_(lambda: open(%q).read())", filepath.Join(w.Data, "kiln.db"))},
		{Name: "daemon socket", Code: fmt.Sprintf("try_(lambda: socket.socket(socket.AF_UNIX).connect(%q))", filepath.Join(w.Data, "kiln.sock"))},
		{Name: "signal host", Code: fmt.Sprintf("try_(lambda: os.kill(%d, 0))", host)},
		{Name: "signal another worker", Code: fmt.Sprintf("try_(lambda: os.kill(%d, 0))", w.Victim.Pid)},
		{Name: "list host processes", Code: fmt.Sprintf(`def f():
    if not os.path.exists("/proc/%d"):
        raise ProcessLookupError("not in /proc")
try_(f)`, host)},
		{Name: "ptrace another worker", Code: ptrace},
		{Name: "pidfd_getfd", Code: getfd},
		{Name: "mount", Code: mount},
		{Name: "a descriptor the host inherited", Code: fmt.Sprintf("try_(lambda: os.write(%d, b'x'))", InheritedFD)},
		{Name: "unshare user namespace", Code: "try_(lambda: check(libc.unshare(0x10000000)))"},
		{Name: "tcp loopback", Code: fmt.Sprintf("try_(lambda: socket.create_connection(('127.0.0.1', %d), timeout=5))", w.TCP), StrictOnly: true},
	}
	if runtime.GOARCH == "amd64" {
		attempts = append(attempts, Attempt{Name: "refused call through the i386 ABI", Code: i386Call})
	}
	return attempts
}

// i386Call makes userfaultfd, which the filter refuses, through the i386 system call
// ABI (int 0x80) that an x86-64 kernel with IA-32 emulation offers every process. It
// prints "absent: …" where the kernel has no such ABI.
const i386Call = `import mmap
mm = ctypes.CDLL(None).mmap
mm.restype = ctypes.c_void_p
mm.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
page = mm(None, 4096, 7, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40, -1, 0)  # rwx, below 4 GiB
def int80(nr, arg):
    # push rbx; mov eax, nr; mov ebx, arg; int 0x80; pop rbx; ret
    code = b"\x53\xb8" + nr.to_bytes(4, "little") + b"\xbb" + arg.to_bytes(4, "little") + b"\xcd\x80\x5b\xc3"
    ctypes.memmove(page, code, len(code))
    return ctypes.CFUNCTYPE(ctypes.c_int)(page)()
child = os.fork()
if child == 0:
    int80(20, 0)  # getpid; without the ABI, a SIGSEGV
    os._exit(0)
if os.waitpid(child, 0)[1] != 0:
    print("absent: no i386 system calls on this kernel", flush=True)
else:
    def f():
        r = int80(374, 1)  # userfaultfd(UFFD_USER_MODE_ONLY)
        if r < 0:
            raise OSError(-r, os.strerror(-r))
        os.close(r)
    try_(f)`

// Check fails t unless out, what a's code printed under profile, is what the profile
// allows: refused under strict, and under workspace unless a is StrictOnly; escaped
// otherwise (none). An attempt this kernel cannot make ("absent: …") skips t.
func (a Attempt) Check(t *testing.T, profile, out string) {
	t.Helper()
	if why, ok := strings.CutPrefix(out, "absent: "); ok {
		t.Skip(strings.TrimSpace(why))
	}
	refused := profile == "strict" || profile == "workspace" && !a.StrictOnly
	if refused && !strings.HasPrefix(out, "refused") {
		t.Errorf("got %q; want refused", out)
	}
	if !refused && !strings.HasPrefix(out, "escaped") {
		t.Errorf("got %q; want escaped", out)
	}
}

// Namespaces names the namespaces process pid does not share with this one, as
// sandbox.Applied names them (user, pid, mount, ipc, net), read from /proc/<pid>/ns.
func Namespaces(pid int) ([]string, error) {
	var apart []string
	for _, ns := range []struct{ name, file string }{{"user", "user"}, {"pid", "pid"}, {"mount", "mnt"}, {"ipc", "ipc"}, {"net", "net"}} {
		self, err := os.Readlink("/proc/self/ns/" + ns.file)
		if err != nil {
			return nil, fmt.Errorf("escapetest: %w", err)
		}
		child, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns.file))
		if err != nil {
			return nil, fmt.Errorf("escapetest: %w", err)
		}
		if child != self {
			apart = append(apart, ns.name)
		}
	}
	return apart, nil
}
