"""Base classes shared by every wire Struct."""

from __future__ import annotations

from typing import Any

import msgspec


class Wire(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A wire object: keyword-only fields, absent optional fields omitted (never null)."""


class Params(Wire):
    """Request params: unknown fields tolerated, MCP `_meta` accepted everywhere."""

    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")
