"""The kiln hooks SDK: what a policy hook receives and what it may decide.

A release's manifest names one hook per slot, each a callable taking ``(request,
context)`` and returning a decision (or an awaitable of one):

- ``attention.plan`` receives an AttentionRequest and returns Wake, Defer or Ignore;
- ``delivery.review`` receives a DeliveryRequest and returns Allow or Hold;
- ``execution.review``, which a manifest may name, receives an ExecutionRequest (a cell the
  agent wrote, before it runs) and returns Allow (it runs) or Hold (it waits for the
  operator to approve or reject it).

A hook only decides: its HookContext says which invocation it serves and holds no handle
on the host, so a hook has no way to act on the world through kiln. The host checks every
decision's bounds (a priority in 0..TOP_PRIORITY, TOP_PRIORITY for operator input only, a
deferral of at most MAX_DEFER_SECONDS) and treats a decision outside them as a failure.

kiln's initial policy, used before any activation, is a release tree of its own (a manifest
and ``kiln_defaults.py``), built into kiln.
"""
from dataclasses import dataclass

__all__ = [
    "TOP_PRIORITY", "MAX_DEFER_SECONDS", "MAX_SEND_TEXT",
    "AttentionRequest", "DeliveryRequest", "ExecutionRequest", "HookContext",
    "Wake", "Defer", "Ignore", "Allow", "Hold",
]

TOP_PRIORITY = 100
"""The highest priority: priorities are integers 0..100, higher more urgent. Only operator
input may be woken at TOP_PRIORITY; the host enforces it."""

MAX_DEFER_SECONDS = 86400
"""The longest deferral the host accepts, in seconds (one day)."""

MAX_SEND_TEXT = 4000
"""The longest text, in characters, that one delivery may send."""


# --- Requests ----------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionRequest:
    """An event asking for the agent's attention, for the ``attention.plan`` slot.

    ``source`` says where the event came from (``operator``, ``peer``, ``discord.dm``, ...);
    ``received_at_ms`` is when the host received it, in Unix milliseconds.
    """

    event_id: int
    source: str
    received_at_ms: int


@dataclass(frozen=True)
class DeliveryRequest:
    """A message the agent wants sent, for the ``delivery.review`` slot."""

    effect_id: int
    destination: str
    text: str


@dataclass(frozen=True)
class ExecutionRequest:
    """A cell the agent wrote, before it runs, for the ``execution.review`` slot: the turn
    that wrote it, its id (``c-N``) and its code."""

    turn: int
    cell: str
    code: str


@dataclass(frozen=True)
class HookContext:
    """Which invocation a hook serves: the slot, the policy revision and the invocation id."""

    slot: str
    revision: str
    invocation_id: str


# --- Decisions of attention.plan --------------------------------------------------------

@dataclass(frozen=True)
class Wake:
    """Wake the agent for the event now, at priority 0..TOP_PRIORITY (higher is sooner)."""

    priority: int

    def to_json(self):
        """Return the decision as the wire carries it."""
        return {"action": "wake", "priority": self.priority}


@dataclass(frozen=True)
class Defer:
    """Look at the event again after this many seconds, at most MAX_DEFER_SECONDS."""

    seconds: float

    def to_json(self):
        """Return the decision as the wire carries it."""
        return {"action": "defer", "seconds": self.seconds}


@dataclass(frozen=True)
class Ignore:
    """Drop the event, saying why."""

    reason: str

    def to_json(self):
        """Return the decision as the wire carries it."""
        return {"action": "ignore", "reason": self.reason}


# --- Decisions of delivery.review and execution.review ----------------------------------

@dataclass(frozen=True)
class Allow:
    """Send the message as it is; run the cell."""

    def to_json(self):
        """Return the decision as the wire carries it."""
        return {"action": "allow"}


@dataclass(frozen=True)
class Hold:
    """Do not send the message, saying why; hold the cell for the operator, saying why."""

    reason: str

    def to_json(self):
        """Return the decision as the wire carries it."""
        return {"action": "hold", "reason": self.reason}
