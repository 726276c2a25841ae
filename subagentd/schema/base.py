"""Base classes shared by every wire Struct."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

Seq = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A sequence number or offset: what SQLite's 64-bit INTEGER holds."""
PageSize = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]


class Wire(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A wire object: keyword-only fields, absent optional fields omitted (never null)."""


class Params(Wire):
    """Request params: unknown fields tolerated, MCP `_meta` accepted everywhere."""

    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")
