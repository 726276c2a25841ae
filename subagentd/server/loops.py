"""The event loops the server runs on (--event-loop): anyio backends; light to import (no anyio)."""

from __future__ import annotations

import importlib.util
from typing import Any

# name: (anyio backend, its options, the module it needs); uvloop is asyncio on uvloop's loop
EVENT_LOOPS: dict[str, tuple[str, dict[str, Any], str]] = {
    "asyncio": ("asyncio", {}, "asyncio"),
    "uvloop": ("asyncio", {"use_uvloop": True}, "uvloop"),
    "trio": ("trio", {}, "trio"),
}


def event_loop(name: str) -> tuple[str, dict[str, Any]]:
    """anyio.run's `backend` and `backend_options` for an --event-loop; ValueError when the
    module it needs is not installed (uvloop comes with `pip install 'subagentd[fast]'`)."""
    backend, options, module = EVENT_LOOPS[name]
    if importlib.util.find_spec(module) is None:
        extra = " (pip install 'subagentd[fast]')" if name == "uvloop" else ""
        raise ValueError(f"--event-loop {name} needs the {module} package{extra}")
    return backend, dict(options)
