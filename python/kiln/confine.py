"""Confinement of a forked worker, from the spec a kiln host made (internal/sandbox).

A spawned worker is confined by kiln's own executable before it executes python. A worker
forked from a zygote executes nothing, so it confines itself here, in the same order and
from the same spec: the cgroups it joins, the view of the filesystem it mounts in its
mount namespace, rlimits, capabilities dropped, the Landlock ruleset the host built
(with the rules of the paths this view mounts anew: /proc, a private /tmp and /dev/shm),
no_new_privs, and the seccomp filter the host assembled. Then it drops every capability
left, as an exec would.

Linux only, x86_64 and aarch64; standard library only (ctypes).
"""
import ctypes
import os
import resource
import struct

_libc = ctypes.CDLL(None, use_errno=True)

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000

_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_SYS_LANDLOCK_ADD_RULE = 445  # the same on every architecture (generic table)
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_RULE_PATH_BENEATH = 1

_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_COVER_OPTIONS = b"mode=0755,size=64k,nr_inodes=1024"
_PRIVATE_DIRS = ("/tmp", "/dev/shm")


class ConfineError(Exception):
    """A step of the confinement failed; its text names the step."""


def _check(result, what):
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _mount(source, target, fstype, flags, data):
    _check(_libc.mount(source, target.encode(), fstype, ctypes.c_ulong(flags), data),
           f"mount {target}")


def _prctl(option, arg2=0, arg3=0, arg4=0, arg5=0):
    return _check(_libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3),
                              ctypes.c_ulong(arg4), ctypes.c_ulong(arg5)), f"prctl {option}")


def _within(path, directory):
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _makedirs(path):
    try:
        os.makedirs(path, 0o755, exist_ok=True)
    except FileExistsError:
        pass


def mount_view(spec):
    """Make the view internal/sandbox's mountView makes: spec's hide covered by an empty
    tmpfs, its keep bound back inside them, a private /tmp and /dev/shm, and a /proc of
    this PID namespace."""
    try:
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
    except OSError as err:
        raise ConfineError(f"making mounts private: {err}") from None
    keeps = []
    try:
        for path in spec.get("keep") or ():
            try:
                fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue  # nothing there to keep
            st = os.fstat(fd)
            keeps.append((path, fd, st.st_dev, st.st_ino))
        keeps.sort(key=lambda k: len(k[0]))
        hides = sorted(spec.get("hide") or (), key=len)

        def cover(directory):
            try:
                _mount(b"tmpfs", directory, b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, _COVER_OPTIONS)
            except OSError as err:
                if err.errno not in (2, 20):  # ENOENT, ENOTDIR: nothing there to hide
                    raise ConfineError(f"hiding {directory}: {err}") from None

        for h in hides:
            cover(h)
        for d in _PRIVATE_DIRS:
            try:
                _mount(b"tmpfs", d, b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=1777")
            except OSError as err:
                if err.errno != 2:
                    raise ConfineError(f"a private {d}: {err}") from None
        for path, fd, dev, ino in keeps:
            try:
                st = os.stat(path)
                if st.st_dev == dev and st.st_ino == ino:
                    continue  # not covered
            except OSError:
                pass
            try:
                _makedirs(path)
                _mount(f"/proc/self/fd/{fd}".encode(), path, None, _MS_BIND | _MS_REC, None)
            except OSError as err:
                raise ConfineError(f"keeping {path}: {err}") from None
        for h in hides:  # a hidden directory inside one kept is covered again
            if any(_within(h, k[0]) and h != k[0] for k in keeps):
                cover(h)
        if spec.get("proc"):
            try:
                _mount(b"proc", "/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
            except OSError as err:
                raise ConfineError(f"mounting /proc: {err}") from None
    finally:
        for k in keeps:
            os.close(k[1])


def reenter(directory, was):
    """Enter directory in the view just mounted, if it is the one this process was in."""
    if not directory:
        return
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise ConfineError(f"entering the working directory {directory} again: {err}") from None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (was.st_dev, was.st_ino):
            raise ConfineError(f"the working directory {directory} is not the directory the child was started in")
        os.fchdir(fd)
    finally:
        os.close(fd)


def set_rlimits(spec):
    """Limit the address space to spec's memory and the user's tasks to its processes."""
    memory = spec.get("memory") or 0
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    processes = spec.get("processes") or 0
    if processes > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        if hard != resource.RLIM_INFINITY and hard < processes:
            processes = hard
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def drop_capability_sets():
    """Empty the ambient and bounding sets."""
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        try:
            _prctl(_PR_CAPBSET_DROP, cap)
        except OSError as err:
            if err.errno not in (1, 22):  # EPERM: none to drop; EINVAL: not in this kernel
                raise ConfineError(f"dropping capability {cap}: {err}") from None


def drop_capabilities():
    """Empty the effective, permitted and inheritable sets, as executing a program with
    no capability in its bounding set would."""
    header = struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two of {effective, permitted, inheritable}, all zero
    _check(_libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)), "capset")


def restrict_landlock(spec):
    """Add the rules of the paths this view mounted anew to the ruleset the host built
    (spec's ruleset, an open file descriptor), and restrict this process to it."""
    ruleset = spec["ruleset"]
    for rule in spec.get("landlock_rules") or ():
        access = rule["access"]
        for path in rule["paths"]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # as the host's rules, a missing path is ignored
            try:
                attr = ctypes.create_string_buffer(struct.pack("=Qi", access, fd), 12)
                _check(_libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, attr, 0),
                       f"adding the rule of {path}")
            finally:
                os.close(fd)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _check(_libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(spec.get("landlock_flags") or 0)),
           "restricting")
    os.close(ruleset)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program):
    """Load the assembled filter program (struct sock_filter each 8 bytes)."""
    if not program or len(program) % 8:
        raise ConfineError("seccomp: no filter program")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _check(_libc.prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(prog),
                       ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp")


def confine(spec, seccomp_program):
    """Apply spec to this process and return what applied, as the helper reports it."""
    applied = {}
    for f in spec.get("cgroups") or ():
        try:
            with open(f, "wb") as cg:
                cg.write(b"0")
        except OSError as err:
            raise ConfineError(f"joining the cgroup: {err}") from None
    if spec.get("mount"):
        names = ["user"]
        if os.getpid() == 1:
            names.append("pid")
        names += ["mount", "ipc"]
        if spec.get("network") == "none":
            names.append("net")
        applied["namespaces"] = names
        was = os.stat(".")
        mount_view(spec)
        reenter(spec.get("cwd"), was)
    if spec.get("rlimits"):
        try:
            set_rlimits(spec)
        except (OSError, ValueError) as err:
            raise ConfineError(f"rlimits: {err}") from None
    drop_capability_sets()
    if spec.get("landlock"):
        try:
            restrict_landlock(spec)
        except OSError as err:
            raise ConfineError(f"landlock: {err}") from None
        applied["landlock_abi"] = spec["landlock"]
        if spec.get("scoped"):
            applied["scoped"] = True
    try:
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    except OSError as err:
        raise ConfineError(f"no_new_privs: {err}") from None
    if spec.get("seccomp"):
        try:
            load_seccomp(seccomp_program)
        except OSError as err:
            raise ConfineError(f"seccomp: {err}") from None
        applied["seccomp"] = True
    try:
        drop_capabilities()
    except OSError as err:
        raise ConfineError(f"capabilities: {err}") from None
    return applied
