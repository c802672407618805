"""The program child's resource limits: applied at boot, re-checked at
completion."""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))

import _signal
import os as _os
import resource as _resource
import sys as _sys

_getrusage = _resource.getrusage
_getrlimit = _resource.getrlimit
_setrlimit = _resource.setrlimit
_RLIM_INFINITY = _resource.RLIM_INFINITY
_RUSAGE_SELF = _resource.RUSAGE_SELF
_RUSAGE_CHILDREN = _resource.RUSAGE_CHILDREN
_RLIMIT_CORE = _resource.RLIMIT_CORE
_RLIMIT_CPU = _resource.RLIMIT_CPU
_RLIMIT_AS = getattr(_resource, "RLIMIT_AS", None)
_signal_set = _signal.signal
_sigmask = _signal.pthread_sigmask
_SIG_UNBLOCK = _signal.SIG_UNBLOCK
_SIG_DFL = _signal.SIG_DFL
_SIGXCPU = _signal.SIGXCPU
_SIGKILL = _signal.SIGKILL
_raise_signal = _signal.raise_signal
_kill = _os.kill
_getpid = _os.getpid


class LimitError(Exception):
    """The limits could not be applied."""


def _stricter(requested, inherited):
    if inherited == _RLIM_INFINITY or inherited < 0:
        return requested
    return min(requested, inherited)


def apply(cpu_seconds, address_space):
    """Apply the limits: RLIMIT_CORE 0, RLIMIT_CPU (cpuSeconds, cpuSeconds + 1)
    and RLIMIT_AS, each clamped to the stricter of the request and what was
    inherited; return the effective CPU soft limit in seconds."""
    try:
        _setrlimit(_RLIMIT_CORE, (0, 0))
        soft, hard = _getrlimit(_RLIMIT_CPU)
        new_soft = _stricter(_stricter(cpu_seconds, soft), hard)
        new_hard = _stricter(min(cpu_seconds, new_soft) + 1, hard)
        if new_soft >= new_hard and new_hard >= 2:
            new_soft = new_hard - 1  # leave room for SIGXCPU before the kernel's SIGKILL
        new_soft = min(new_soft, new_hard)
        _setrlimit(_RLIMIT_CPU, (new_soft, new_hard))
        cpu_soft = new_soft
        if _RLIMIT_AS is not None and _sys.platform != "darwin":
            soft, hard = _getrlimit(_RLIMIT_AS)
            new_hard = _stricter(address_space, hard)
            new_soft = min(_stricter(address_space, soft), new_hard)
            _setrlimit(_RLIMIT_AS, (new_soft, new_hard))
        _signal_set(_SIGXCPU, _SIG_DFL)
        _sigmask(_SIG_UNBLOCK, {_SIGXCPU})
    except (OSError, ValueError) as e:
        raise LimitError("bootstrap: applying resource limits failed: %s" % e) from None
    return cpu_soft


def cpu_exhausted(soft):
    """Whether the child and its children used up soft seconds of CPU time
    (None or infinity: no limit)."""
    if soft is None or soft == _RLIM_INFINITY or soft < 0:
        return False
    own = _getrusage(_RUSAGE_SELF)
    children = _getrusage(_RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime >= soft


def end_by_cpu_limit():
    """End the child as its CPU limit would; never returns."""
    _raise_signal(_SIGXCPU)
    _kill(_getpid(), _SIGKILL)  # pragma: no cover - SIGXCPU's default action ended us
