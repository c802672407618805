"""A zygote: a process that has imported the worker once and forks each new worker.

The host (internal/zygote) starts it as::

    python3 -I -S -c LAUNCHER <pkgroot> - kiln.zygote

with a SOCK_SEQPACKET socket to the host as fd 3. Each message the host sends is one
request, ``{"flags": N, "report": FD}``, with the new worker's file descriptors attached: stdin,
stdout, stderr, those the spec names, and last a pipe that carries the worker's own
request (its spec, environment, directory and arguments, JSON). Only the new worker
reads that pipe, so that no session's environment is ever in the zygote's memory, which
every later worker inherits. The zygote answers each message with ``{"pid": N}`` or
``{"error": "..."}``. It ends when the host closes the socket.

A worker is made with one clone(2): CLONE_PARENT, so that it is the host's child, as a
spawned worker is (the host reaps it, its parent-death signal is the host's), and the
namespaces the request asks (user, PID, mount, IPC, network), so that it is init of a PID
namespace of its own. The zygote writes its user and group maps, then lets it go on. The
child writes ``pid N`` (its pid in the host's namespace) on the report descriptor, applies
the confinement of the spec (kiln.confine), writes ``ok {applied}`` and runs the worker's
main as a spawned worker's launcher would. A failure is ``error ...`` on the same
descriptor, and the child's end.

The zygote itself is never confined: it runs only the host's requests, and no cell code.
"""
import _socket
import ctypes
import fcntl
import gc
import json
import os
import platform
import sys

from kiln import confine, startup

_HOST_FD = 3
_MAX_REQUEST = 1 << 20
_MAX_FDS = 16
_CLONE_PARENT = 0x00008000
_CLONE_NEWUSER = 0x10000000
_SIGCHLD = 17
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_SIGKILL = 9
_PR_SET_PDEATHSIG = 1
_EXIT_CONFINE = 126

# Modules a worker imports only when it needs them, imported here once for every worker.
_PRELOAD = ("kiln.worker", "kiln.limits", "kiln.hooks")


def main(argv):
    """Serve the host's requests on fd 3 until it closes it."""
    if argv:
        startup.fail("zygote", f"no arguments expected (got {argv!r})")
    clone = _SYS_CLONE.get(platform.machine())
    if clone is None:
        startup.fail("zygote", f"no clone for {platform.machine()}")
    sock = _socket.socket(fileno=_HOST_FD)
    for module in _PRELOAD:
        __import__(module)
    startup.seal_stdin()
    gc.collect()
    gc.freeze()  # what the workers share stays shared: the collector no longer writes it
    forker = ctypes.PyDLL(None, use_errno=True).syscall  # the GIL held across the clone
    forker.restype = ctypes.c_long
    while True:
        try:
            data, ancillary, _, _ = sock.recvmsg(_MAX_REQUEST, _socket.CMSG_SPACE(_MAX_FDS * 4))
        except InterruptedError:
            continue
        if not data:
            os._exit(0)
        fds = []
        for level, kind, payload in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds.extend(int.from_bytes(payload[i:i + 4], sys.byteorder) for i in range(0, usable, 4))
        try:
            reply = {"pid": _fork(sock, forker, clone, json.loads(data), fds)}
        except Exception as err:  # noqa: BLE001 - every failure is the host's to know
            reply = {"error": f"{type(err).__name__}: {err}"}
        finally:
            for fd in fds:
                os.close(fd)
        sock.sendall(json.dumps(reply).encode())


def _fork(sock, forker, clone, request, fds):
    """Start one worker; return its pid."""
    flags = int(request["flags"])
    gate_r, gate_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = forker(clone, ctypes.c_ulong(flags | _CLONE_PARENT | _SIGCHLD), 0, 0, 0, 0)
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        try:
            sock.detach()  # fd 3 is the host's socket only in the zygote
            os.close(gate_w)
            _child(fds, gate_r, int(request["report"]))
        finally:
            os._exit(_EXIT_CONFINE)
    err = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    os.close(gate_r)
    try:
        if pid < 0:
            raise OSError(err, f"clone: {os.strerror(err)}")
        if flags & _CLONE_NEWUSER:
            uid, gid = os.getuid(), os.getgid()
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/{pid}/{name}", "w") as f:
                    f.write(text)
        os.write(gate_w, b"g")
    finally:
        os.close(gate_w)
    return pid


def _place(fds, gate):
    """Put fds at 0, 1, …, the gate after them, and close every other descriptor; return
    the gate's new number."""
    above = max(fds + [gate, len(fds)]) + 1
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in fds + [gate]]  # clobbered by no dup2
    for i, fd in enumerate(high):
        os.dup2(fd, i)
    os.closerange(len(high), 1 << 16)
    return len(fds)


def _read_request(fd):
    """Read the worker's request from the pipe fd, to its end, and close it."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks))


def _child(fds, gate, report):
    """In the new worker: say its pid on report, read its request, confine it, then run
    its module."""
    if not fds:
        return
    gate = _place(fds, gate)
    os.setpgid(0, 0)
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)

    def say(line):
        os.write(report, (line + "\n").encode("utf-8", "replace"))

    say(f"pid {os.readlink('/proc/self')}")
    if os.read(gate, 1) != b"g":
        say("error the zygote did not map the user namespace")
        return
    os.close(gate)
    try:
        request = _read_request(len(fds) - 1)
        spec = request.get("spec") or {}
        if request.get("cwd"):
            os.chdir(request["cwd"])
        if spec.get("confine"):
            applied = confine.confine(spec, bytes.fromhex(spec.get("seccomp_program") or ""))
        else:
            applied = {}
            if os.geteuid() != 0:
                confine.drop_capabilities()  # as executing python as another user would
    except (confine.ConfineError, OSError, ValueError, AttributeError) as err:
        say(f"error {err}")
        return
    say("ok " + json.dumps(applied))
    os.close(report)
    os.environ.clear()
    for entry in request.get("env") or ():
        key, eq, value = entry.partition("=")
        if eq and key:
            os.environ[key] = value
    argv = request["argv"]
    sys.argv = sys.argv[:3] + argv  # as a spawned worker's launcher leaves it, with the zygote's package root
    module = __import__(argv[0], fromlist=["main"])
    module.main(argv[1:])
