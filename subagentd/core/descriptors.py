"""Reading a child's stored descriptor, and saying exactly what is wrong when it cannot be used."""

from __future__ import annotations

import msgspec

from subagentd.schema.messages import DESCRIPTOR_VERSION, Descriptor, descriptor_decoder


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
