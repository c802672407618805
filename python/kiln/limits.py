"""A workbench's limits: the address space of its worker (RLIMIT_AS), and the CPU time
each cell may use (RLIMIT_CPU's soft limit, moved on as each cell starts).

A cell past its CPU time gets CPULimitExceeded raised in its code by SIGXCPU, which the
kernel sends again each second while the cell runs on; a cell that ran out of memory
gets MemoryError, as Python raises it.
"""
import _signal
import math
import os
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

    A cell is charged what the process uses while it runs, less what the threads that
    were there before it (an earlier cell's, left running) use meanwhile: its own code
    and the threads it starts. RLIMIT_CPU counts the whole process, so at its SIGXCPU
    the cell's own time is measured, and a cell not yet at its limit has the soft
    limit moved on by what it has left.

    in_cell() reports whether the cell's own code is what runs now; SIGXCPU elsewhere
    (the worker's own code, or an idle loop) raises nothing, and the next one, a second
    later, finds the cell.
    """

    def __init__(self, seconds, in_cell):
        self.seconds = seconds
        self._in_cell = in_cell
        self._armed = False
        self._hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        self._base = 0.0  # the process's CPU time as the cell started
        self._others = {}  # thread id -> [CPU time as the cell started, as last seen]
        _signal.signal(_signal.SIGXCPU, self._on_xcpu)

    def arm(self):
        """Let the cell starting now use self.seconds of CPU time from here."""
        self._base = _process_cpu()
        # The main thread's id as /proc names it: in a PID namespace of its own, the
        # worker's pid is not its id in the /proc it reads.
        main = int(os.readlink("/proc/self"))
        self._others = {tid: [used, used] for tid, used in _thread_cpus().items() if tid != main}
        self._set_soft(self._base + self.seconds)
        self._armed = True

    def disarm(self):
        """Lift the limit until the next cell starts."""
        self._armed = False
        resource.setrlimit(resource.RLIMIT_CPU, (self._hard, self._hard))

    def used(self):
        """The CPU time the armed cell has used: the process's since it started, less
        what the threads that were there before it have used since."""
        now = _process_cpu()
        threads = _thread_cpus()
        others = 0.0
        for tid, seen in self._others.items():
            if tid in threads:
                seen[1] = threads[tid]
            others += seen[1] - seen[0]
        return max(0.0, now - self._base - others), now

    def _set_soft(self, seconds):
        soft = _stricter(math.ceil(seconds), self._hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, self._hard))

    def _on_xcpu(self, signum, frame):
        if not self._armed:
            return
        used, now = self.used()
        if used < self.seconds:  # threads of earlier cells used it: the cell has time left
            self._set_soft(now + self.seconds - used)
            return
        if self._in_cell():
            raise CPULimitExceeded(f"the cell used its {self.seconds} CPU-seconds (the workbench's cpu_seconds limit)")


_TICKS = os.sysconf("SC_CLK_TCK")


def _process_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _thread_cpus():
    """The user and system time of each thread of this process, by thread id."""
    cpus = {}
    for name in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended meanwhile
        cpus[int(name)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return cpus
