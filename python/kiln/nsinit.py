"""The init in front of a kiln child's program: PID 1 of the child's PID namespace.

The host starts python as init of a PID namespace of its own, so that the kernel ends
everything the program starts when it ends. An init is a poor program, though: it
receives only the signals it handles (a CPU limit's SIGXCPU among those it would send
itself), and every orphan of the namespace becomes its child, a zombie until it is
waited for. So, before any of the program runs, ``front`` forks: the child goes
on as the program; the parent stays behind as the namespace's init. It

- relays to the program the signals the host sends it;
- waits for every child it gets, the orphans of the namespace included, so that none
  stays a zombie and the program's own waits (``subprocess``) see only its children;
- once the program has ended, writes its wait status on the status descriptor the host
  gave, ``<status>\\n``, and exits; the kernel then ends what is left in the namespace.

Not PID 1 (the kernel refused the namespace, or the start did not ask for one), the
process is the program alone, and the status descriptor is closed unwritten.
"""

import os as _os
import _signal

# The signals relayed to the program: those the host sends (SIGINT to interrupt, SIGTERM
# to stop) and those a terminal or a user might.
_RELAYED = (
    _signal.SIGHUP,
    _signal.SIGINT,
    _signal.SIGQUIT,
    _signal.SIGTERM,
    _signal.SIGUSR1,
    _signal.SIGUSR2,
    _signal.SIGALRM,
    _signal.SIGCONT,
    _signal.SIGWINCH,
)


def front(status_fd):
    """As PID 1, fork the program and serve as the namespace's init, never returning
    there; return True in the program, and False where this process is not PID 1."""
    if _os.getpid() != 1:
        _os.close(status_fd)
        return False
    waited = set(_RELAYED) | {_signal.SIGCHLD}
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, waited)  # none lost before the loop
    program = _os.fork()
    if program == 0:
        _os.close(status_fd)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
        return True
    try:
        _os.closerange(0, status_fd)
        _os.closerange(status_fd + 1, 1 << 20)
        status = _serve(program, waited)
        _os.write(status_fd, b"%d\n" % status)
        code = _os.waitstatus_to_exitcode(status)
        _os._exit(code if code >= 0 else 128 - code)  # as a shell would say it
    finally:
        _os._exit(125)


def _serve(program, waited):
    """Relay signals and reap children until the program has ended; return its wait
    status."""
    for sig in _RELAYED:
        # Handled, so that the kernel delivers it to an init at all; blocked, so that
        # the loop below takes it.
        _signal.signal(sig, lambda s, _: _os.kill(program, s))
    while True:
        info = _signal.sigwaitinfo(waited)
        if info.si_signo != _signal.SIGCHLD:
            try:
                _os.kill(program, info.si_signo)
            except ProcessLookupError:
                pass  # ended: SIGCHLD is on its way
            continue
        while True:
            try:
                pid, status = _os.waitpid(-1, _os.WNOHANG)
            except ChildProcessError:
                return 125 << 8  # no child left, the program's end never seen
            if pid == 0:
                break
            if pid == program:
                return status
