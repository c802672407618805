"""The child bootstrap of a one-shot program: docs/programs.md, the child's side.

The host starts

    python3 -I -c 'import sys; sys.path.insert(0, sys.argv[1]); from kiln.program import main; main()' <dir>

with fd 3 one end of a Unix stream socket pair. main() then

1. reads ``boot`` from fd 3, applies the resource limits, puts fd 0 on
   /dev/null, builds one proxy global per namespace and sends ``boot-ack``;
2. waits for ``run`` (a child left waiting, as a pool's are, imports asyncio
   meanwhile), captures print / sys.stdout / sys.stderr as ``log`` frames
   under the child's ledger, compiles the program as the body of an ``async
   def`` (top-level await; ``return v`` is the completion) and, if the
   compiled body can suspend, runs it on an asyncio event loop: binding calls
   go out as ``call`` frames and their ``reply`` frames come back through a
   reader on that loop, so that they can run concurrently (asyncio.gather);
   a body that cannot suspend runs to its end in one step, with no loop;
3. sends exactly one ``done`` and leaves with os._exit(0).

One module per responsibility:

- program_channel: fd 3, both directions;
- program_ledger: the logs and the streams model code writes to;
- program_bridge: the proxy globals and their binding calls;
- program_limits: the resource limits, applied at boot, re-checked at the end;
- program_compile: the source as the body of an async def;
- program_render: tracebacks and capped messages;
- program_driver: boot, run and completion;
- program_keeper: the keeper, which ends the child's process group with it, where
  the child is not init of a PID namespace of its own (nsinit is in front of it there).

Everything the bootstrap relies on after model code starts is bound when these
modules are imported, before it starts: the os / sys / signal functions, the
fd-3 channel, the JSON codec, the builtins (each module looks them up in a
private snapshot); only the codec's regular expressions, for what few runs
meet, are compiled at their first use, importing re then. A program that rebinds print, builtins, sys.stdout or module
attributes, or deletes entries of sys.modules, cannot keep ``done`` from being
sent; one that closes fd 3, kills itself or digs into these modules' objects
can, as it could always forge frames on fd 3 anyway: the host treats every
frame as hostile.
"""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))

import os as _os

from kiln.program_channel import PROTOCOL_FD
from kiln.program_driver import UNRENDERABLE, BootError, Child, LimitError
from kiln import nsinit, program_keeper

__all__ = ["main"]

_write = _os.write
_exit = _os._exit


def main(argv=()):
    """Run one program on fd 3 and exit; never returns. The only arguments are
    ``--status-fd N``, the descriptor an init in front of the program reports on."""
    argv = list(argv)
    if argv and (len(argv) != 2 or argv[0] != "--status-fd" or not argv[1].isdigit()):
        _write(2, ("kiln program: unexpected arguments %r\n" % (argv,)).encode("utf-8", "replace"))
        _exit(2)
    # Before any program code can fork: the init, as PID 1 of the child's namespace, or
    # else the keeper.
    if not (argv and nsinit.front(int(argv[1]))):
        program_keeper.start()
    child = None
    try:
        child = Child()
        try:
            child.boot()
            child.run()
        except (BootError, LimitError) as e:
            child.send_error("exception", str(e))  # exits
    except BaseException:
        pass
    try:
        if child is not None:
            child.channel.final(UNRENDERABLE)
        else:
            _write(PROTOCOL_FD, UNRENDERABLE)
    except BaseException:
        pass
    _exit(0)
