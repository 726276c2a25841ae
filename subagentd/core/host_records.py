"""The host API's records (PROTOCOL.md section 4): agent/get, agent/list, message/get, transcripts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from subagentd.core import texts
from subagentd.core.agents import Agents
from subagentd.core.descriptors import DescriptorProblem, parse_descriptor
from subagentd.core.listing import mark_parked, project, with_held
from subagentd.core.stamps import now
from subagentd.errors import InvalidParamsError
from subagentd.schema.host_methods import (
    AgentInfo,
    Event,
    ListParams,
    ListResult,
    MessageInfo,
    StoredEvent,
    TranscriptReadResult,
)
from subagentd.schema.listing import ChildRow
from subagentd.schema.messages import Source

if TYPE_CHECKING:
    from subagentd.schema.host_methods import AgentKind
    from subagentd.schema.messages import Mode
    from subagentd.schema.records import SessionRecord

_encode = msgspec.json.encode
MAX_PAGE = 1000
MAX_PAGE_BYTES = 1024 * 1024  # transcript/read: event data per page (one event always fits)


class HostRecords:
    """What the host reads back, and the transcript events it appends: no state rule decides."""

    def __init__(self, agents: Agents) -> None:
        self.agents = agents
        self.store = agents.store

    def get(self, agent_id: str) -> AgentInfo:
        record = self.agents.require_session(agent_id)
        kind, mode, label = self._kind(record)
        queued, parked = self.store.inbox_counts(agent_id)
        budgets = self.agents.budgets
        row = self.store.spending_rows([agent_id]).get(agent_id)
        live = self.agents.registry.get(agent_id)
        held = live.held_by if live is not None else None
        if held is None and queued and (live is None or live.turn is None):
            lineage = (
                live.lineage if live is not None else budgets.lineage(agent_id, record.parent_id)
            )
            refusal = budgets.refusal(lineage)
            held = refusal.held() if refusal is not None else None
        return AgentInfo(
            agent_id=agent_id,
            parent_id=record.parent_id,
            kind=kind,
            mode=mode,
            label=label,
            status=self.agents.status_of(agent_id),
            depth=record.depth,
            created_at=record.created_at,
            queued=queued,
            parked=parked,
            usage=budgets.own(row),
            tree_usage=budgets.tree(row),
            budget=budgets.info(row),
            held=held,
            on_parent_close="finish" if row is not None and row.close_policy == "finish" else None,
        )

    def _kind(self, record: SessionRecord) -> tuple[AgentKind, Mode | None, str | None]:
        if record.kind != "subagent":
            return "ordinary", None, record.label
        try:
            descriptor = parse_descriptor(self.store.get_descriptor(record.id))
        except DescriptorProblem:
            return "unknown", None, record.label
        return descriptor.mode, descriptor.mode, descriptor.label

    def append_transcript(self, agent_id: str, turn_id: str | None, events: list[Event]) -> int:
        self.agents.require_session(agent_id)
        if not events:
            raise InvalidParamsError("events must not be empty")
        try:
            encoded = [(e.type, _encode(e.data).decode()) for e in events]
        except RecursionError:
            raise InvalidParamsError("event data is nested too deeply to store") from None
        return self.store.append_events(agent_id, turn_id, encoded, now())

    def read_transcript(
        self, agent_id: str, after: int | None, limit: int | None
    ) -> TranscriptReadResult:
        self.agents.require_session(agent_id)
        limit = _page_size(limit)
        records, more = self.store.read_events(agent_id, after or 0, limit, MAX_PAGE_BYTES)
        events = [
            StoredEvent(
                seq=r.seq,
                type=r.type,
                data=msgspec.json.decode(r.data) if r.data is not None else None,
                at=r.at,
                turn_id=r.turn_id,
            )
            for r in records
        ]
        return TranscriptReadResult(events=events, next=records[-1].seq if more else None)

    def list_host(self, params: ListParams) -> ListResult:
        self.agents.require_session(params.root_id)
        limit = _page_size(params.limit)
        offset = 0
        if params.cursor is not None:
            if not (params.cursor.isascii() and params.cursor.isdigit()):
                raise InvalidParamsError(f'invalid cursor "{texts.shown(params.cursor[:64])}"')
            offset = int(params.cursor)
        rows = project(
            self.store,
            params.root_id,
            params.scope == "descendants",
            self.agents.status_lookup(),
            include_one_shot=params.include_one_shot,
        )
        page = mark_parked(self.store, rows[offset : offset + limit])
        page = with_held(page, self.agents.registry.held_tree) or page
        if params.usage:
            spending = self.store.spending_rows([row.id for row in page])
            own = self.agents.budgets.own
            for row in page:
                if isinstance(row, ChildRow):
                    row.usage = own(spending.get(row.id))
        more = offset + limit < len(rows)
        return ListResult(agents=page, next_cursor=str(offset + limit) if more else None)

    def get_message(self, message_id: str) -> MessageInfo:
        record = self.store.get_message(message_id)
        if record is None:
            raise InvalidParamsError(texts.NO_MESSAGE.format(id=message_id))
        return MessageInfo(
            message_id=message_id,
            agent_id=record.session_id,
            state=record.state,
            turn_id=record.turn_id,
            source=msgspec.json.decode(record.source, type=Source),
        )


def _page_size(limit: int | None) -> int:
    return MAX_PAGE if limit is None else min(limit, MAX_PAGE)
