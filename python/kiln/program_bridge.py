"""The program's bindings: the proxy globals, and the binding calls they make as
call frames whose replies come back through the pump on the event loop."""

import builtins as _builtins_module

__builtins__ = dict(vars(_builtins_module))

from kiln import jsonplain as _jp

_encode = _jp.encode
_string_text = _jp.string_text
_loads_bytes = _jp.loads_bytes
_NotLossless = _jp.NotLossless
_MISSING = object()
# bound by bind_asyncio once the child has imported asyncio
_get_running_loop = None


def bind_asyncio(asyncio):
    """Bind what the bridge uses of asyncio, before model code runs."""
    global _get_running_loop
    _get_running_loop = asyncio.get_running_loop


class Bridge:
    """Binding calls: ids 0, 1, 2, … claimed, written and advanced under the
    channel's lock. A call awaits a future of the event loop it runs on; the
    pump, a reader on the main loop, settles it: at once on the main loop,
    through call_soon_threadsafe on another (a thread's asyncio.run)."""

    def __init__(self, channel):
        self.channel = channel
        self.next_id = 0
        self.pending = {}  # id -> (loop, future)
        self.loop = None  # the main event loop, once the run has one; None: no call can be answered
        self.fail = None  # ends the run with an exception the pump met; never returns

    def make_member(self, global_name, name, error_class, member_property):
        bridge = self
        head = ',"global":%s,"name":%s,"args":' % (_string_text(global_name)[0], _string_text(name)[0])

        async def member(*positional, **keywords):
            # One calling convention with cells: keyword arguments are the argument
            # object; one positional value (an object, a path) is the argument as it is.
            if keywords and positional or len(positional) > 1:
                raise TypeError("%s.%s takes keyword arguments, or one argument (an object), not both"
                                % (global_name, name))
            args = keywords if keywords else positional[0] if positional else None
            try:
                args_text = _encode(args)
            except _NotLossless as e:
                raise TypeError(
                    "%s.%s: the argument is not lossless JSON: %s" % (global_name, name, e.reason)
                ) from None
            reply = await bridge.submit(global_name, name, head, args_text)
            if reply.get("ok") is True:
                return reply.get("value")
            message = reply.get("message")
            if type(message) is not str:
                message = "binding call rejected"
            if error_class is None:
                raise RuntimeError(message)
            error = error_class(message)
            setattr(error, member_property, name)
            raise error

        member.__name__ = name
        member.__qualname__ = "%s.%s" % (global_name, name)
        return member

    def submit(self, global_name, name, head, args_text):
        """Claim the next id, send the call, and return the future of its reply
        frame, on the running event loop."""
        if self.loop is None:
            # Nothing reads fd 3 for replies: the program has no await of its own
            # and runs without an event loop (Child.run_inline).
            raise RuntimeError("%s.%s: a binding call needs a program that awaits; this one has no await "
                               "of its own, so it runs without an event loop" % (global_name, name))
        loop = _get_running_loop()
        future = loop.create_future()
        channel = self.channel
        with channel.lock:
            if channel.closed:
                raise RuntimeError("%s.%s: the program has completed" % (global_name, name))
            call_id = self.next_id
            data = ('{"type":"call","id":%d%s%s}\n' % (call_id, head, args_text)).encode("utf-8")
            if channel.cap is not None and len(data) - 1 > channel.cap:
                raise ValueError("%s.%s: the call is %d bytes as a frame; fd 3 carries at most %d"
                                 % (global_name, name, len(data) - 1, channel.cap))
            self.pending[call_id] = (loop, future)
            channel.send(data)
            self.next_id = call_id + 1
        return future

    def on_readable(self):
        """The pump, called by the loop when fd 3 is readable."""
        channel = self.channel
        try:
            with channel.lock:
                channel.absorb()
                channel.absorbed = False
                lines = channel.take_lines()
            for line in lines:
                self.on_line(line)
        except MemoryError:
            self.out_of_memory()

    def on_inbox(self):
        """The pump, woken by a writer that read frames while it waited."""
        channel = self.channel
        try:
            with channel.lock:
                lines = channel.take_lines()
            for line in lines:
                self.on_line(line)
        except MemoryError:
            self.out_of_memory()

    def out_of_memory(self):
        """The pump ran out of memory: what it holds goes, and the run ends with a
        MemoryError that says where. An exception in a loop callback would only be
        logged, and the calls would wait for replies that never come."""
        self.channel.inbox = bytearray()
        self.pending.clear()
        self.fail(MemoryError("out of memory while receiving binding replies"))

    def on_line(self, line):
        """Hand a reply to its caller; drop every other line. Runs on the main
        loop."""
        try:
            frame = _loads_bytes(line)
        except ValueError:
            return
        if type(frame) is not dict or frame.get("type") != "reply":
            return
        call_id = frame.get("id")
        if type(call_id) is float and call_id.is_integer():
            call_id = int(call_id)
        if type(call_id) is not int:
            return
        entry = self.pending.pop(call_id, _MISSING)
        if entry is _MISSING:
            return  # not a call in flight
        loop, future = entry
        if loop is self.loop:
            if not future.done():  # cancelled: its caller is gone
                future.set_result(frame)
            return
        try:
            loop.call_soon_threadsafe(_settle, future, frame)
        except RuntimeError:
            pass  # that loop is closed: its caller is gone


def _settle(future, frame):
    if not future.done():
        future.set_result(frame)


def make_namespace(global_name, members):
    """The proxy global: ns.name and ns["name"] give the member's async function."""
    members = dict(members)
    object_getattribute = object.__getattribute__

    def getattribute(self, attr):
        fn = members.get(attr)
        if fn is not None:
            return fn
        if attr[:2] == "__" and attr[-2:] == "__":
            return object_getattribute(self, attr)
        raise AttributeError("%s has no binding %r" % (global_name, attr))

    class Namespace:
        __slots__ = ()

        def __getattr__(self, attr):  # what the class does not have
            return getattribute(self, attr)

        def __getitem__(self, key):
            fn = members.get(key) if type(key) is str else None
            if fn is None:
                raise KeyError(key)
            return fn

        def __setattr__(self, attr, value):
            raise AttributeError("%s is read-only" % global_name)

        def __delattr__(self, attr):
            raise AttributeError("%s is read-only" % global_name)

        def __contains__(self, key):
            return type(key) is str and key in members

        def __iter__(self):
            return iter(list(members))

        def __len__(self):
            return len(members)

        def __dir__(self):
            return sorted(members)

        def __repr__(self):
            return "<bindings %s: %s>" % (global_name, ", ".join(members))

    if any(n[:2] == "__" and n[-2:] == "__" for n in members):
        Namespace.__getattribute__ = getattribute  # a binding named like a special attribute wins
    else:
        for n, fn in members.items():  # looked up as class attributes: no Python call
            setattr(Namespace, n, staticmethod(fn))
    Namespace.__name__ = Namespace.__qualname__ = "Bindings"
    Namespace.__module__ = "builtins"
    return Namespace()


def make_error_class(name, member_property):
    cls = type(name, (Exception,), {"__module__": "__main__", "__qualname__": name,
                                     "__doc__": "A rejected binding call."})
    setattr(cls, member_property, None)
    return cls
