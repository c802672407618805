"""The workbench's event loop: asyncio's selector loop, with a selector that polls for a
short window after the worker sends a frame, before it sleeps.

An answer from the host usually comes within microseconds. A process asleep in its selector
when it lands must be woken on an idle CPU, which on a virtual machine costs several times
the work of the answer itself; polling through the window keeps the CPU awake for it.
The worker imports this module only when a cell first needs the loop.
"""
import asyncio
import selectors
import time


class _PollingSelector(selectors.DefaultSelector):
    """A selector whose waits poll until poll_until() (a time.perf_counter() reading)."""

    def __init__(self, poll_until):
        super().__init__()
        self._poll_until = poll_until

    def select(self, timeout=None):
        """Return the ready files, as selectors do; a wait first polls within the window."""
        if timeout is None or timeout > 0:
            end = self._poll_until()
            if timeout is not None:
                end = min(end, time.perf_counter() + timeout)
            while time.perf_counter() < end:
                ready = super().select(0)
                if ready:
                    return ready
        return super().select(timeout)


def new_event_loop(poll_until):
    """Return a new event loop whose selector polls while time.perf_counter() < poll_until()."""
    return asyncio.SelectorEventLoop(_PollingSelector(poll_until))
