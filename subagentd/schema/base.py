"""Base classes shared by every wire Struct."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

Seq = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A sequence number or offset: what SQLite's 64-bit INTEGER holds."""
PageSize = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]

MAX_ID_BYTES = 128
# C0 and C1 controls, soft hyphen, Arabic letter mark, Mongolian vowel separator, zero-width and
# bidi formatting characters, line and paragraph separators, word joiners, the byte order mark.
ID_FORBIDDEN = r"\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
ID_PATTERN = f"^[^@{ID_FORBIDDEN}][^{ID_FORBIDDEN}]*$"
ID_RULE = (
    f"an agent id is 1 to {MAX_ID_BYTES} bytes (UTF-8), does not start with @ (reserved), and holds"
    " no control, bidi, zero-width or other invisible formatting characters"
)
AgentId = Annotated[
    str,
    msgspec.Meta(min_length=1, max_length=MAX_ID_BYTES, pattern=ID_PATTERN, description=ID_RULE),
]
"""A new agent id (`agents/open`, `agents/spawn`); ids that already exist are named as they are."""


class Wire(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A wire object: keyword-only fields, absent optional fields omitted (never null)."""


class Params(Wire):
    """Request params: unknown fields tolerated (MCP's methods, which clients extend), MCP
    `_meta` accepted everywhere."""

    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class HostParams(Params, forbid_unknown_fields=True):
    """Params of a host API method: a field the method does not have is refused (-32602 naming
    it and the closest field it has), so a misspelled optional field is never silently ignored."""
