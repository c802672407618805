"""kiln's initial policy: the module of the release tree epoch 0 names, before any activation.

Attention: operator input wakes the agent at TOP_PRIORITY, a peer's request or result at 80,
a Discord direct message at 60, a mention at 40; ambient Discord chatter is deferred ten
minutes; anything else is ignored.
Delivery: only non-empty text of at most MAX_SEND_TEXT characters to the operator is sent.
"""
from kiln_hooks import MAX_SEND_TEXT, TOP_PRIORITY, Allow, Defer, Hold, Ignore, Wake

OPERATOR = "operator"
"""The source of the operator's input, and the destination that reaches the operator."""

# Decisions are frozen, so one instance serves every request from its source.
_PLANS = {
    OPERATOR: Wake(TOP_PRIORITY),
    "peer": Wake(80),
    "discord.dm": Wake(60),
    "discord.mention": Wake(40),
    "discord.ambient": Defer(600),
}


def attention(request, context):
    """Plan attention for request (an AttentionRequest) by its source alone."""
    plan = _PLANS.get(request.source)
    if plan is None:
        return Ignore(f"unknown source {request.source!r}: the default policy plans only "
                      f"for {', '.join(sorted(_PLANS))}")
    return plan


def delivery(request, context):
    """Review request (a DeliveryRequest): allow non-empty text of at most MAX_SEND_TEXT
    characters to the operator; hold anything else, saying why."""
    if request.destination != OPERATOR:
        return Hold(f"the default policy delivers only to {OPERATOR!r}, "
                    f"not to {request.destination!r}")
    if not request.text:
        return Hold("the text is empty")
    if len(request.text) > MAX_SEND_TEXT:
        return Hold(f"the text is {len(request.text)} characters, "
                    f"over the limit of {MAX_SEND_TEXT}")
    return Allow()
