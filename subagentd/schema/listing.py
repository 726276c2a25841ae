"""Rows of an agent listing, shared by the list_agents tool and the host's agents/list."""

from __future__ import annotations

from typing import Literal

from subagentd.schema.base import Wire
from subagentd.schema.budgets import Held, Spent
from subagentd.schema.messages import Mode

# waiting: running, and its question, or one below it to the person, is open
Status = Literal["running", "waiting", "idle", "ready"]
# how a turn ended as storage keeps it: the host's reasons, and `deadline` for a turn aborted
# after its lineage's deadline passed
Ended = Literal["completed", "aborted", "max-tokens", "refusal", "error", "deadline"]


# Listing rows hold only text and numbers: untracked by the cycle collector (gc=False), so a
# 10k-row listing allocates no objects the collector has to visit.
class ChildRow(Wire, tag_field="kind", tag="child", kw_only=True, gc=False):
    id: str
    label: str
    status: Status
    mode: Mode | None = None  # set by the host's agents/list only
    parent: str | None = None
    depth: int | None = None
    parked: int | None = None  # parked messages, when it holds any: `[idle, 2 parked]`
    ended: Ended | None = None  # how its last turn ended, on list_agents' ready rows only
    usage: Spent | None = None  # its own usage, set by the host's agents/list only
    held: Held | None = None  # an idle row whose tree a spent budget holds (nothing of it runs)


class DiagnosticRow(Wire, tag_field="kind", tag="diagnostic", kw_only=True, gc=False):
    id: str
    reason: Literal["corrupt", "unsupported", "unavailable"]
    parent: str | None = None
    depth: int | None = None


AgentRow = ChildRow | DiagnosticRow
