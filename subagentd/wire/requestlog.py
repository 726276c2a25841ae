"""`--log-level debug`: one stderr line per request handled (method, id, duration)."""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

log = logging.getLogger("subagentd.requests")
_encode = msgspec.json.Encoder().encode


def log_request(method: str, request_id: Any, is_request: bool, started: float) -> None:
    """Called only when debug logging is on; `started` is a time.perf_counter() reading."""
    elapsed_ms = (time.perf_counter() - started) * 1000
    shown = _encode(request_id).decode() if is_request else "(notification)"
    log.debug("request %s id=%s handled in %.3f ms", method, shown, elapsed_ms)
