"""The service: the engine, the host API and the tools, plus idempotency keys around them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec

from subagentd.core.commits import COMMITS
from subagentd.core.host_api import HostApi
from subagentd.core.stamps import now
from subagentd.core.tools import ToolRules
from subagentd.errors import IdempotencyConflictError
from subagentd.schema.records import IdempotencyRecord
from subagentd.schema.stats import CommitLatency, StatsResult

R = TypeVar("R", bound=msgspec.Struct)


class Service(HostApi, ToolRules):
    """Everything subagentd decides; the server only translates the wire to these calls."""

    def idempotent(
        self,
        caller: str,
        key: str | None,
        method: str,
        arguments: object,
        result_type: type[R],
        run: Callable[[], R],
    ) -> R:
        """Run once per (caller, key): a retry with the same arguments gets the original result."""
        if key is None:
            return run()
        fingerprint = msgspec.json.encode([method, arguments], order="sorted").decode()
        stored = self.store.get_idempotent(caller, key)
        if stored is not None:
            if stored.method == method and stored.fingerprint == fingerprint:
                return msgspec.json.decode(stored.result, type=result_type)
            raise IdempotencyConflictError(
                f'idempotency key "{key}" was already used by "{caller}" with different arguments'
            )
        result = run()
        self.store.put_idempotent(
            caller,
            key,
            IdempotencyRecord(
                method=method, fingerprint=fingerprint, result=msgspec.json.encode(result).decode()
            ),
            now(),
        )
        return result

    def stats(self) -> StatsResult:
        """server/stats: the database's figures, plus this process's live agents and commits."""
        figures = self.store.stats()
        figures.live_here = len(self.registry)
        figures.commits = COMMITS.count
        p50, p99 = COMMITS.percentile(0.5), COMMITS.percentile(0.99)
        if p50 is not None and p99 is not None:
            figures.commit_latency = CommitLatency(
                p50_ms=round(p50 * 1000, 3), p99_ms=round(p99 * 1000, 3)
            )
        return figures
