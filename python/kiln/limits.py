"""A workbench's limits: the address space of its worker (RLIMIT_AS), and the CPU time
each cell may use (RLIMIT_CPU's soft limit, moved on as each cell starts).

A cell past its CPU time gets CPULimitExceeded raised in its code by SIGXCPU, which the
kernel sends again each second while the cell runs on; a cell that ran out of memory
gets MemoryError, as Python raises it.
"""
import _signal
import math
import resource


class CPULimitExceeded(BaseException):
    """A cell used the CPU time it may. A BaseException, so that ``except Exception``
    in the cell does not hide it."""


CPULimitExceeded.__module__ = "builtins"  # a traceback names it as it names MemoryError


def _stricter(requested, inherited):
    if inherited == resource.RLIM_INFINITY or inherited < 0:
        return requested
    return min(requested, inherited)


def limit_memory(nbytes):
    """Limit the process's address space to nbytes, or what it inherited if less."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    new_hard = _stricter(nbytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (min(_stricter(nbytes, soft), new_hard), new_hard))


class CellCPU:
    """The CPU time of each cell: armed as a cell starts, disarmed as it completes.

    in_cell() reports whether the cell's own code is what runs now; SIGXCPU elsewhere
    (the worker's own code, or an idle loop) raises nothing, and the next one, a second
    later, finds the cell.
    """

    def __init__(self, seconds, in_cell):
        self.seconds = seconds
        self._in_cell = in_cell
        self._armed = False
        self._hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        _signal.signal(_signal.SIGXCPU, self._on_xcpu)

    def arm(self):
        """Let the cell starting now use self.seconds of CPU time from here."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = _stricter(math.ceil(usage.ru_utime + usage.ru_stime) + self.seconds, self._hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, self._hard))
        self._armed = True

    def disarm(self):
        """Lift the limit until the next cell starts."""
        self._armed = False
        resource.setrlimit(resource.RLIMIT_CPU, (self._hard, self._hard))

    def _on_xcpu(self, signum, frame):
        if self._armed and self._in_cell():
            raise CPULimitExceeded(f"the cell used its {self.seconds} CPU-seconds (the workbench's cpu_seconds limit)")
