"""Quotas (SECURITY.md): bounds on what models can make subagentd store, run and inject.

Every check runs before the request writes anything, inside its transaction, and refuses with
QuotaExceededError (1011 OVERLOADED, `data.quota` naming the serve option). A bound of 0 is off.
"""

from __future__ import annotations

from subagentd.core import texts
from subagentd.core.registry import LiveAgent, Registry
from subagentd.core.settings import Settings
from subagentd.core.store import Store
from subagentd.errors import QuotaExceededError


def utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


class Quotas:
    """The checks, and the one piece of state they keep: report bytes per child per window."""

    def __init__(self, settings: Settings, registry: Registry, store: Store) -> None:
        self.settings = settings
        self.registry = registry
        self.store = store
        self._reports: dict[str, tuple[float, int]] = {}  # child id -> (window start, bytes)

    def text(self, what: str, value: str | None, label: bool = False) -> None:
        """A message, prompt, report or output (or a label) within its byte limit."""
        settings = self.settings
        limit = settings.max_label_bytes if label else settings.max_text_bytes
        if value is None or not limit or len(value) * 4 <= limit:  # short: no need to measure
            return
        self._fits(what, value, limit, "max-label-bytes" if label else "max-text-bytes")

    def descriptor(self, body: str) -> None:
        """A child's descriptor (persona, model names, tool filter, label) within one text plus
        one label: it is copied into every cold resume."""
        settings = self.settings
        if settings.max_text_bytes and settings.max_label_bytes:
            limit = settings.max_text_bytes + settings.max_label_bytes
            self._fits(texts.THE_DESCRIPTOR, body, limit, "max-text-bytes")

    def _fits(self, what: str, value: str | None, limit: int, quota: str) -> None:
        if value is None or not limit or len(value) * 4 <= limit:  # UTF-8: at most 4 bytes a char
            return
        size = utf8_size(value)
        if size > limit:
            raise QuotaExceededError(
                texts.QUOTA_TOO_LONG.format(what=what, size=size, limit=limit), quota, limit
            )

    def activation(self, parent_id: str | None) -> None:
        """Room for one more live agent: in the process, below its parent, in its tree."""
        settings, registry = self.settings, self.registry
        if settings.max_live and len(registry) >= settings.max_live:
            raise QuotaExceededError(
                texts.QUOTA_LIVE.format(limit=settings.max_live), "max-live", settings.max_live
            )
        parent = registry.get(parent_id)
        if parent is None:
            return
        limit = settings.max_children
        if limit and registry.live_children(parent) >= limit:
            raise QuotaExceededError(
                texts.QUOTA_CHILDREN.format(id=texts.shown(parent.agent_id), limit=limit),
                "max-children",
                limit,
            )
        limit = settings.max_live_per_root
        if limit:
            root = registry.root_of(parent)
            if 1 + len(registry.subtree(root)) >= limit:  # walks at most `limit` agents
                raise QuotaExceededError(
                    texts.QUOTA_TREE.format(root=texts.shown(root.agent_id), limit=limit),
                    "max-live-per-root",
                    limit,
                )

    def inbox(self, agent_id: str, agent: LiveAgent | None, extra: int = 1) -> None:
        """Room for `extra` more waiting messages in this inbox."""
        limit = self.settings.max_queued
        if not limit:
            return
        waiting = agent.pending if agent is not None else sum(self.store.inbox_counts(agent_id))
        if waiting + extra > limit:
            raise QuotaExceededError(
                texts.QUOTA_INBOX.format(id=texts.shown(agent_id), limit=limit),
                "max-queued",
                limit,
            )

    def database(self) -> None:
        """Model-driven writes stop when the database reached --max-db-bytes."""
        limit = self.settings.max_db_bytes
        if limit and self.store.size_bytes() >= limit:
            raise QuotaExceededError(
                texts.QUOTA_DATABASE.format(limit=limit), "max-db-bytes", limit
            )

    def report(self, child_id: str, output: str) -> None:
        """The child's report budget (fixed windows): refused past it, charged when it passes."""
        limit = self.settings.report_budget
        if not limit:
            return
        window = self.settings.report_window
        now_s = self.settings.clock.monotonic()
        start, spent = self._reports.get(child_id, (now_s, 0))
        if now_s - start >= window:
            start, spent = now_s, 0
        size = utf8_size(output)
        if spent + size > limit:
            self._reports[child_id] = (start, spent)
            raise QuotaExceededError(
                texts.QUOTA_REPORTS.format(
                    id=texts.shown(child_id), limit=limit, window=f"{window:g}"
                ),
                "report-budget",
                limit,
            )
        self._reports[child_id] = (start, spent + size)

    def forget(self, agent_id: str) -> None:
        """The agent left: its report window goes with it (memory stays bounded by live agents)."""
        self._reports.pop(agent_id, None)
