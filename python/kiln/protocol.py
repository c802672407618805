"""The fd-3 program protocol's wire vocabulary, mirrored from the Go host.

docs/programs.md is the contract. This module declares the frames' shapes as
TypedDicts whose required and optional key sets are machine-readable
(``__required_keys__`` / ``__optional_keys__``), and the two surfaces both
sides execute against: PROTOCOL_FD and log_truncation_marker. It holds no
runtime logic; the child's codec lives in kiln.jsonplain and its bootstrap in
kiln.program.

Field sets are declared by inheritance (a required base, then a ``total=False``
subclass for the optional keys) rather than with ``NotRequired``, which
typing only has from Python 3.11; the resulting key sets are the same.
"""

from typing import Any, List, Literal, TypedDict, Union

__all__ = [
    "PROTOCOL_FD",
    "LOG_TRUNCATION_PREFIX",
    "ERROR_KINDS",
    "log_truncation_marker",
    "field_sets",
    "Boot",
    "Namespace",
    "ErrorClass",
    "Run",
    "ReplyOk",
    "ReplyErr",
    "Reply",
    "BootAck",
    "Call",
    "Log",
    "Done",
    "DoneError",
    "HostFrame",
    "ChildFrame",
]

#: The child's end of the protocol channel: one Unix stream socket, both directions.
PROTOCOL_FD = 3

#: What every log truncation marker begins with.
LOG_TRUNCATION_PREFIX = "[kiln] log capture truncated at "

#: The values ``done.error.kind`` may take.
ERROR_KINDS = ("exception", "invalid-output", "output-limit")


def log_truncation_marker(max_log_bytes: int) -> str:
    """Return the log entry that ends a run's logs once a ledger ran out."""
    if type(max_log_bytes) is not int or max_log_bytes < 0:
        raise ValueError("max_log_bytes must be a non-negative int")
    return "%s%d bytes" % (LOG_TRUNCATION_PREFIX, max_log_bytes)


# --- host → child ---------------------------------------------------------------


class ErrorClass(TypedDict):
    """The exception class a namespace's rejected calls raise."""

    name: str
    memberNameProperty: str


# "global" is a keyword, so the required part is declared functionally.
_NamespaceRequired = TypedDict("_NamespaceRequired", {"global": str, "names": List[str]})


class Namespace(_NamespaceRequired, total=False):
    """One proxy global and the binding names it serves."""

    errorClass: ErrorClass


class Boot(TypedDict):
    """The first frame: limits, budgets and bindings."""

    type: Literal["boot"]
    cpuSeconds: int
    addressSpaceBytes: int
    maxLogBytes: int
    maxValueBytes: int
    namespaces: List[Namespace]


class Run(TypedDict):
    """The program, sent once, only after boot-ack."""

    type: Literal["run"]
    program: str


class ReplyOk(TypedDict):
    """A binding call's result."""

    type: Literal["reply"]
    id: int
    ok: Literal[True]
    value: Any


class ReplyErr(TypedDict):
    """A binding call's rejection."""

    type: Literal["reply"]
    id: int
    ok: Literal[False]
    message: str


Reply = Union[ReplyOk, ReplyErr]

# --- child → host ---------------------------------------------------------------


class BootAck(TypedDict):
    """Limits applied, bindings built."""

    type: Literal["boot-ack"]


# "global" again: functional syntax.
Call = TypedDict(
    "Call",
    {"type": Literal["call"], "id": int, "global": str, "name": str, "args": Any},
)
Call.__doc__ = "A binding call; ids count 0, 1, 2, … with no gaps."


class _LogRequired(TypedDict):
    type: Literal["log"]
    text: str


class Log(_LogRequired, total=False):
    """One log line; ``open`` marks a piece continued by the next frame and
    ``truncated`` marks the child's truncation notice (its text is discarded)."""

    truncated: Literal[True]
    open: Literal[True]


class DoneError(TypedDict):
    """Why a run failed, as the child saw it."""

    kind: Literal["exception", "invalid-output", "output-limit"]
    message: str


class _DoneRequired(TypedDict):
    type: Literal["done"]


class Done(_DoneRequired, total=False):
    """The completion: ``value`` (absent means null) or ``error``."""

    value: Any
    error: DoneError


HostFrame = Union[Boot, Run, ReplyOk, ReplyErr]
ChildFrame = Union[BootAck, Call, Log, Done]

#: Frame names as field_sets reports them, with their TypedDicts. A name with
#: several variants (reply) reports the keys every variant requires as
#: required and the rest as optional.
_FRAMES = (
    ("boot", (Boot,)),
    ("namespace", (Namespace,)),
    ("errorClass", (ErrorClass,)),
    ("run", (Run,)),
    ("reply", (ReplyOk, ReplyErr)),
    ("boot-ack", (BootAck,)),
    ("call", (Call,)),
    ("log", (Log,)),
    ("done", (Done,)),
    ("done.error", (DoneError,)),
)


def field_sets() -> dict:
    """Return ``{frame: {"required": [...], "optional": [...]}}``, keys sorted.

    The Go side's mirror test spawns python3 and compares these with its own
    frame declarations.
    """
    out = {}
    for name, variants in _FRAMES:
        required = set(variants[0].__required_keys__)
        every = set()
        for td in variants:
            required &= set(td.__required_keys__)
            every |= set(td.__required_keys__) | set(td.__optional_keys__)
        out[name] = {"required": sorted(required), "optional": sorted(every - required)}
    return out


if __name__ == "__main__":  # pragma: no cover - a convenience for the mirror test
    import json
    import sys

    json.dump({"fd": PROTOCOL_FD, "marker": log_truncation_marker(0), "frames": field_sets()}, sys.stdout)
    sys.stdout.write("\n")
