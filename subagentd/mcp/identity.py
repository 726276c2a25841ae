"""Who an MCP request acts for: the caller of a tools/call or a resources/* request."""

from __future__ import annotations

from typing import Any

import msgspec

from subagentd.core import texts
from subagentd.errors import CallerUnauthorizedError
from subagentd.mcp.tools import ACTIVATION_META, CALLER_META, IDEMPOTENCY_META, CallerIdentity
from subagentd.wire.call import Call


def caller_identity(call: Call, meta: dict[str, Any] | None) -> CallerIdentity:
    """The caller: `_meta["subagentd/caller"]` (null counts as absent), else `--caller`; with
    `--caller R` a `_meta` caller must be R or a live agent below R (PROTOCOL.md section 5)."""
    meta = meta or {}
    confined = call.session.default_caller
    caller = meta.get(CALLER_META)
    identity = msgspec.convert(
        {
            "caller": confined if caller is None else caller,
            "activation": meta.get(ACTIVATION_META),
            "idempotency_key": meta.get(IDEMPOTENCY_META),
        },
        CallerIdentity,
    )
    if confined is not None and identity.caller != confined:
        if not call.service.below(identity.caller, confined):
            raise CallerUnauthorizedError(
                texts.CALLER_OUTSIDE.format(
                    caller=texts.shown(identity.caller or ""), root=texts.shown(confined)
                )
            )
    return identity
