"""Reading a child's stored descriptor, and saying exactly what is wrong when it cannot be used;
checking the remote agent a new one names."""

from __future__ import annotations

import msgspec

from subagentd.core import texts
from subagentd.core.settings import TOOL_NAMES
from subagentd.errors import InvalidParamsError
from subagentd.schema.messages import (
    DESCRIPTOR_VERSION,
    AgentChoice,
    Descriptor,
    ToolFilter,
    descriptor_decoder,
)


class DescriptorProblem(Exception):
    """A stored descriptor that cannot be used: `reason` is "corrupt" or "unsupported"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_descriptor(body: str | bytes | None) -> Descriptor:
    """Decode a stored descriptor, classifying what is wrong with it."""
    if body is None:
        raise DescriptorProblem("corrupt")
    try:
        descriptor = descriptor_decoder.decode(body)  # the common case: one typed decode
    except msgspec.DecodeError:
        pass
    else:
        if descriptor.version != DESCRIPTOR_VERSION:
            raise DescriptorProblem("unsupported")
        return descriptor
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise DescriptorProblem("corrupt") from None
    if not isinstance(raw, dict):
        raise DescriptorProblem("corrupt")
    version = raw.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version != DESCRIPTOR_VERSION:
        raise DescriptorProblem("unsupported")
    try:
        return msgspec.convert(raw, Descriptor)
    except msgspec.ValidationError:
        raise DescriptorProblem("corrupt") from None


def filtered_tools(tool_filter: ToolFilter | None) -> frozenset[str] | None:
    """The tools a child's `tool_filter` leaves it (None: no restriction); `report` always stays,
    since a filter must not remove the one return channel (seed 003)."""
    if tool_filter is None or (tool_filter.allow is None and not tool_filter.deny):
        return None
    allowed = set(TOOL_NAMES if tool_filter.allow is None else tool_filter.allow)
    allowed.difference_update(tool_filter.deny or ())
    allowed.add("report")
    return frozenset(allowed.intersection(TOOL_NAMES))


def checked_agent(agent: AgentChoice | None, listed: tuple[str, ...]) -> AgentChoice | None:
    """A spawn's `agent` when the A2A agent it names is one the deployment lists (--a2a-agent);
    else InvalidParamsError naming the ones it lists."""
    if agent is None or agent.a2a in listed:
        return agent
    shown = texts.shown(agent.a2a[:200])
    if not listed:
        raise InvalidParamsError(texts.SPAWN_A2A_NONE.format(name=shown))
    raise InvalidParamsError(texts.SPAWN_A2A_UNKNOWN.format(name=shown, names=", ".join(listed)))
