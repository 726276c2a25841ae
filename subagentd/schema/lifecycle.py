"""MCP lifecycle: initialize (handshake era), server/discover (stateless era), ping, cancellation."""

from __future__ import annotations

from typing import Any, Literal

from subagentd.schema.base import Params, Wire

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
STATELESS_VERSIONS = ("2026-07-28",)
SUPPORTED_VERSIONS = STATELESS_VERSIONS + HANDSHAKE_VERSIONS
VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"


class Implementation(Wire, kw_only=True):
    name: str
    version: str
    title: str | None = None


class InitializeParams(Params, kw_only=True):
    protocolVersion: str | None = None
    clientInfo: dict[str, Any] | None = None
    capabilities: dict[str, Any] | None = None


class InitializeResult(Wire, kw_only=True):
    protocolVersion: str
    serverInfo: Implementation
    capabilities: dict[str, Any]
    instructions: str | None = None


class DiscoverResult(Wire, kw_only=True, omit_defaults=False):
    """MCP 2026-07-28 DiscoverResult; the caching directives and resultType are required there."""

    supportedVersions: list[str]
    capabilities: dict[str, Any]
    serverInfo: Implementation
    instructions: str
    resultType: Literal["complete"] = "complete"
    ttlMs: int = 0
    cacheScope: Literal["private", "public"] = "private"


class CancelledParams(Params, kw_only=True):
    """`notifications/cancelled` (MCP)."""

    requestId: int | str
    reason: str | None = None


class CancelRequestParams(Params, kw_only=True):
    """`$/cancelRequest` (LSP)."""

    id: int | str
