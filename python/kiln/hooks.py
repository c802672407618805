"""The hooks worker process: serves a policy's hooks, one invocation at a time, to a kiln host.

The host starts it as::

    python3 -I -S -c LAUNCHER <pkgroot> - kiln.hooks --socket <path> --session <id>
        --generation <id> --revision <rev> --release <dir>

and writes the startup token, in hex, as the first line on its stdin, exactly as for the
workbench worker (kiln.worker); one forked from a zygote has ``--socket-fd N`` instead. The policy is the release directory's ``manifest.json``::

    {"version": 1, "hooks": {"attention.plan": "pkg.module:function",
                             "delivery.review": "pkg.module:function"}}

naming every slot of REQUIRED_SLOTS, and perhaps ``execution.review`` too.

and the directory goes first on sys.path, so its modules import. The host gives the
worker a private copy of a release it has checked (kiln's initial release included), never
the stored tree itself. Every hook is imported and its signature checked before
the worker connects: a policy that does not load ends the process with status 2 and one
diagnostic line on stderr, so the host's handshake fails with the reason in the stderr tail.

Then the worker says hello, naming its slots and echoing the revision, and serves on one
thread: each ``invoke`` calls its slot's hook with the request and a HookContext and
completes with the hook's decision, or with a ``failed`` result saying why there is none;
the worker serves on after a failed invocation. A hook that returns an awaitable has it run
to completion on one asyncio event loop, kept for good and made only when first needed.

A hook is never interrupted: ``interrupt`` frames and SIGINT change nothing, and a hook
that overruns is the host's to stop by ending the generation. ``shutdown`` ends the process
with status 0; a frame that does not decode, a host that goes away, or a message no hooks
worker takes ends it with status 2.
"""
import _signal
import dataclasses
import importlib
import inspect
import json
import os
import sys

from kiln import startup, wire
from kiln.output import CaptureStream, OutputRouter, cap_error_text
from kiln_hooks import (Allow, AttentionRequest, Defer, DeliveryRequest, ExecutionRequest,
                        Hold, HookContext, Ignore, Wake)


MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1

ATTENTION_PLAN = "attention.plan"
DELIVERY_REVIEW = "delivery.review"
EXECUTION_REVIEW = "execution.review"

def _attention_problem(request):
    """Return what is wrong with the values of an AttentionRequest, or None."""
    if request.event_id <= 0:
        return f"event_id must be > 0, got {request.event_id}"
    if request.received_at_ms < 0:
        return f"received_at_ms must be >= 0, got {request.received_at_ms}"
    return None


def _delivery_problem(request):
    """Return what is wrong with the values of a DeliveryRequest, or None."""
    if request.effect_id <= 0:
        return f"effect_id must be > 0, got {request.effect_id}"
    return None


def _execution_problem(request):
    """Return what is wrong with the values of an ExecutionRequest, or None."""
    if request.turn <= 0:
        return f"turn must be > 0, got {request.turn}"
    if not request.cell:
        return "cell must not be empty"
    return None


# Each slot's request type, what its values must hold, and the decisions its hook may
# return.
SLOTS = {
    ATTENTION_PLAN: (AttentionRequest, _attention_problem, (Wake, Defer, Ignore)),
    DELIVERY_REVIEW: (DeliveryRequest, _delivery_problem, (Allow, Hold)),
    EXECUTION_REVIEW: (ExecutionRequest, _execution_problem, (Allow, Hold)),
}

# The slots every manifest names; a manifest may name the others of SLOTS too.
REQUIRED_SLOTS = (ATTENTION_PLAN, DELIVERY_REVIEW)

EXECUTE_REFUSAL = "execute is for the workbench role; this is a hooks worker"

_RECEIVE_SIZE = 1 << 16
_OPTIONS = ("--session", "--generation", "--revision", "--release")


def main(argv):
    """Run a hooks worker; argv is ``--socket PATH --session ID --generation ID --revision
    REV --release DIR``.

    Never returns: the worker ends the process when the host says so or goes away.
    """
    options = startup.parse_options("hooks", argv, _OPTIONS, ("--socket", "--socket-fd"),
                                    ("--session", "--generation", "--revision"))
    token = startup.read_token("hooks")
    startup.seal_stdin()
    _signal.signal(_signal.SIGINT, _ignore_signal)
    sys.stdout = _fd_stream(wire.STREAM_STDOUT, 1)
    sys.stderr = _fd_stream(wire.STREAM_STDERR, 2)
    hooks = load_policy(options["--release"])
    sock = startup.connect("hooks", options)
    HooksWorker(sock, options["--session"], options["--generation"], options["--revision"],
                hooks).serve(token)


# --- Starting ----------------------------------------------------------------------------

def _fail(reason):
    startup.fail("hooks", reason)


def _ignore_signal(signum, frame):
    """Do nothing: the host's SIGINT after an interrupt or a shutdown frame stops no hook."""


def _fd_stream(stream, fd):
    """Return a text stream that writes straight to the real descriptor fd, unbuffered, so
    what hooks print reaches the host's drain and nothing is lost when the process ends.

    A CaptureStream writes to its descriptor whenever no cell is attached to its router,
    and a hooks worker never attaches one.
    """
    return CaptureStream(OutputRouter(), stream, fd)


# --- The policy --------------------------------------------------------------------------

class PolicyError(Exception):
    """A policy that cannot be served: the message says why."""


def load_policy(release):
    """Return the hooks to serve, by slot: the release directory's. Fail, ending the
    process, if any of them does not load."""
    try:
        release = os.path.abspath(release)
        entrypoints = read_manifest(release)
        sys.dont_write_bytecode = True  # a release is immutable: cache nothing in it
        sys.path.insert(0, release)
        return {slot: resolve(slot, entrypoints[slot]) for slot in SLOTS if slot in entrypoints}
    except PolicyError as err:
        _fail(str(err))


def read_manifest(release):
    """Read and check the manifest of the release directory; return its entrypoints by slot."""
    path = os.path.join(release, MANIFEST_NAME)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as err:
        raise PolicyError(f"cannot read the manifest {path}: {err.strerror or err}") from None
    try:
        manifest = _strict_json(data)
    except (ValueError, RecursionError) as err:
        raise PolicyError(f"the manifest {path} is not valid JSON: {err}") from None
    problem = _manifest_problem(manifest)
    if problem is not None:
        raise PolicyError(f"the manifest {path} is malformed: {problem}")
    return manifest["hooks"]


def _refuse_duplicates(pairs):
    """Build a JSON object, refusing one that names a member twice."""
    members = dict(pairs)
    if len(members) != len(pairs):
        raise ValueError("an object names one member twice")
    return members


def _refuse_constant(name):
    """Refuse NaN and Infinity, which are not JSON."""
    raise ValueError(f"{name} is not JSON")


def _strict_json(data):
    """Parse data as strict JSON in UTF-8; raise ValueError if it is not."""
    return json.loads(data.decode("utf-8"), object_pairs_hook=_refuse_duplicates,
                      parse_constant=_refuse_constant)


def _manifest_problem(manifest):
    """Return what is wrong with a parsed manifest, or None if it has exactly the shape
    ``{"version": 1, "hooks": {<slot>: <string>, ...}}`` with every required slot named once
    and no slot but those of SLOTS."""
    if type(manifest) is not dict:
        return "want a JSON object"
    if sorted(manifest) != ["hooks", "version"]:
        return f"want exactly the members 'version' and 'hooks', got {sorted(manifest)}"
    version, hooks = manifest["version"], manifest["hooks"]
    if type(version) is not int or version != MANIFEST_VERSION:
        return f"version must be {MANIFEST_VERSION}, got {json.dumps(version)}"
    if type(hooks) is not dict:
        return "'hooks' must be an object of entrypoints by slot"
    for slot in REQUIRED_SLOTS:
        if slot not in hooks:
            return f"'hooks' has no entrypoint for the slot {slot}"
    for slot, entrypoint in hooks.items():
        if slot not in SLOTS:
            return f"'hooks' names the unknown slot {slot!r} (the slots are {', '.join(SLOTS)})"
        if type(entrypoint) is not str:
            return f"the entrypoint of {slot} must be a 'module:attribute' string"
    return None


def resolve(slot, entrypoint):
    """Import entrypoint, ``module:attribute``, and return the callable it names, checked to
    take (request, context); raise PolicyError naming slot and entrypoint if it cannot."""
    try:
        return _hook(entrypoint)
    except PolicyError as err:
        raise PolicyError(f"{slot}: entrypoint {entrypoint!r}: {err}") from None


def _hook(entrypoint):
    """Return the callable entrypoint names; raise PolicyError saying why there is none."""
    module_name, _, attribute = entrypoint.partition(":")
    if not (_dotted_name(module_name) and _dotted_name(attribute)):
        raise PolicyError("want 'module:attribute', each a dotted Python name")
    try:
        target = importlib.import_module(module_name)
    except BaseException as exc:  # a module's own code may raise anything, SystemExit too
        raise PolicyError(f"cannot import {module_name}: {describe(exc)}") from None
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except Exception as exc:
            raise PolicyError(f"cannot get {attribute} from {module_name}: {describe(exc)}") \
                from None
    if not callable(target):
        raise PolicyError(f"{attribute} is not callable (type {type(target).__qualname__})")
    _check_signature(attribute, target)
    return target


def _dotted_name(text):
    """Report whether text is one or more Python identifiers joined by dots."""
    return all(part.isidentifier() for part in text.split("."))


def _check_signature(attribute, hook):
    """Raise PolicyError unless hook can be called with two positional arguments."""
    try:
        signature = inspect.signature(hook)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"cannot read the signature of {attribute}: {exc}") from None
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise PolicyError(f"{attribute}{signature} cannot be called as hook(request, context): "
                          f"{exc}") from None


def describe(exc):
    """Return ``Type: message`` for exc, the type qualified by its module unless builtin."""
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = f"{kind.__module__}.{name}"
    try:
        message = str(exc)
    except Exception:
        message = "<the exception's str() failed>"
    return f"{name}: {message}" if message else name


# --- Invocations -------------------------------------------------------------------------

def build_request(request_type, fields):
    """Return request_type built from fields, a JSON object that must hold exactly its
    fields, each of its type (an int field takes an integer, not a boolean); raise
    ValueError saying what is wrong otherwise."""
    want = {field.name: field.type for field in dataclasses.fields(request_type)}
    unknown = sorted(name for name in fields if name not in want)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}")
    for name, kind in want.items():
        if name not in fields:
            raise ValueError(f"missing field {name!r}")
        if type(fields[name]) is not kind:
            raise ValueError(f"field {name!r} must be {kind.__name__}, "
                             f"not {type(fields[name]).__name__}")
    return request_type(**fields)


def _failed(error):
    """Return the failed result carrying error, bounded to MAX_ERROR_BYTES of UTF-8."""
    return {"kind": wire.RESULT_FAILED, "error": cap_error_text(error)}


def _names(types):
    """Return the names of types, for a message."""
    return ", ".join(kind.__name__ for kind in types)


class HooksWorker:
    """Serves one host connection: reads its frames and answers each invoke in turn."""

    def __init__(self, sock, session_id, generation, revision, hooks):
        self._sock = sock
        self._session_id = session_id
        self._generation = generation
        self._revision = revision
        self._hooks = hooks  # slot -> callable
        self._frames = wire.FrameSplitter()
        self._loop = None  # the event loop awaitables run on, once a hook returns one

    def serve(self, token):
        """Say hello with token, the revision and the slots, and serve forever."""
        self._send(wire.HELLO, {"token": token, "role": wire.ROLE_HOOKS,
                                "revision": self._revision, "slots": sorted(self._hooks)})
        while True:
            self._dispatch(*self._receive())

    def _receive(self):
        """Return the host's next message as (kind, message); fail if there is none."""
        try:
            while (payload := self._frames.next()) is None:
                data = self._sock.recv(_RECEIVE_SIZE)
                if not data:
                    where = " inside a frame" if self._frames.partial() else ""
                    _fail(f"the host closed the connection{where}")
                self._frames.feed(data)
            return wire.decode(payload, self._session_id, self._generation)
        except OSError as err:
            _fail(f"cannot read from the host: {err}")
        except (wire.FrameError, wire.DecodeError) as err:
            _fail(f"cannot read from the host: {type(err).__name__}: {err}")

    def _dispatch(self, kind, message):
        """Act on one message of the host."""
        if kind == wire.INVOKE:
            result = self.invoke(message["id"], message["slot"], message["input"])
            self._complete(message["id"], message["slot"], result)
        elif kind == wire.EXECUTE:
            self._send(wire.COMPLETED, {"id": message["id"], "result": _failed(EXECUTE_REFUSAL)})
        elif kind == wire.INTERRUPT:
            pass  # a hook is never interrupted; the host ends a generation whose hook overruns
        elif kind == wire.SHUTDOWN:
            os._exit(0)  # the standard streams write through: nothing is buffered
        else:
            _fail(f"the host sent a {kind} message, which a hooks worker does not take")

    def invoke(self, invocation_id, slot, fields):
        """Call slot's hook on the request in fields; return the completed result: the hook's
        decision, or a failure saying why there is none."""
        hook = self._hooks.get(slot)
        if hook is None:
            return _failed(f"unknown slot {slot!r}; this worker serves {', '.join(sorted(self._hooks))}")
        request_type, problem_of, decisions = SLOTS[slot]
        try:
            request = build_request(request_type, fields)
        except ValueError as err:
            return _failed(f"malformed {slot} input, want a {request_type.__name__}: {err}")
        problem = problem_of(request)
        if problem is not None:
            return _failed(f"invalid {slot} input: {problem}; the hook was not called")
        context = HookContext(slot, self._revision, invocation_id)
        try:
            decision = hook(request, context)
            if inspect.isawaitable(decision):
                decision = self._await(decision)
        except BaseException as exc:  # whatever a hook raises fails its invocation alone
            return _failed(f"the {slot} hook raised {describe(exc)}")
        if type(decision) not in decisions:
            return _failed(f"the {slot} hook returned {type(decision).__qualname__}, "
                           f"not one of {_names(decisions)}")
        return {"kind": wire.RESULT_HOOK, "value": decision.to_json()}

    def _await(self, awaitable):
        """Run awaitable to completion on the worker's event loop; return its result."""
        if self._loop is None:
            import asyncio  # here, not above: a policy of plain functions never loads it

            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
        return self._loop.run_until_complete(awaitable)

    # --- Writing frames ------------------------------------------------------------------

    def _complete(self, invocation_id, slot, result):
        """Send the completion of an invocation; a decision that JSON or a frame cannot
        carry (NaN, an arbitrary object, megabytes of text) fails the invocation instead."""
        try:
            frame = self._frame(wire.COMPLETED, {"id": invocation_id, "result": result})
        except (ValueError, TypeError, RecursionError, wire.FrameSizeError) as err:
            result = _failed(f"the {slot} hook's decision cannot be sent: {describe(err)}")
            frame = self._frame(wire.COMPLETED, {"id": invocation_id, "result": result})
        self._write(frame)

    def _send(self, kind, fields):
        self._write(self._frame(kind, fields))

    def _frame(self, kind, fields):
        return wire.pack_frame(wire.encode(self._session_id, self._generation, kind, fields))

    def _write(self, frame):
        try:
            self._sock.sendall(frame)
        except OSError as err:
            _fail(f"cannot write to the host: {err}")
