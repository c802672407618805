"""The program child's keeper: a process forked before any program code runs,
that ends the child's process group when the child ends.

The host kills the group when a run settles, but a host killed with SIGKILL
kills only the child (its parent-death signal): what the program started in
the child's group, orphans whose parent exited included, would outlive it.
The keeper holds no descriptor but a pidfd of the child, and is not its child
(a fork of a fork); it waits for the child's exit, whatever ends it, then sends
SIGKILL to the group, itself in it.
A process that left the group (setsid) is not its to find.
"""

import os as _os
import select as _select
import _signal

_fork = _os.fork
_exit = _os._exit


def start():
    """Fork the keeper; a kernel without pidfds gets none."""
    try:
        me = _os.pidfd_open(_os.getpid())
    except (OSError, AttributeError):
        return False
    group = _os.getpgid(0)
    middle = _fork()
    if middle:
        _os.close(me)
        _os.waitpid(middle, 0)
        return True
    try:
        if _fork():
            _exit(0)  # the keeper is no child of the program's: its waits never see it
        for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
            _signal.signal(sig, _signal.SIG_IGN)  # the group's signals are the child's
        _os.closerange(0, me)
        _os.closerange(me + 1, 1 << 20)
        poll = _select.poll()
        poll.register(me, _select.POLLIN)
        poll.poll()
        _os.killpg(group, _signal.SIGKILL)
    finally:
        _exit(0)
