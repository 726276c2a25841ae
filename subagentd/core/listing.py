"""The list_agents projection (SEMANTICS.md section 6): rows from storage, status from the registry.

Longer than ~300 lines on purpose: the rows, what their brackets say (endings, parked, held by a
budget) and their rendering are one listing's, and drift apart when split.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from subagentd.core import texts
from subagentd.core.descriptors import DescriptorProblem, parse_descriptor
from subagentd.core.registry import LiveAgent
from subagentd.core.store import Store
from subagentd.schema.budgets import Held
from subagentd.schema.listing import AgentRow, ChildRow, DiagnosticRow, Ended, Status
from subagentd.schema.messages import Mode

_BATCH = 900  # ids per IN (...) query, under SQLite's default variable limit


def read_descriptors(store: Store, ids: list[str]) -> dict[str, str | bytes | None | Exception]:
    """Descriptor bodies by id; a read that fails is retried alone and kept as its exception."""
    bodies: dict[str, str | bytes | None | Exception] = {}
    for start in range(0, len(ids), _BATCH):
        chunk = ids[start : start + _BATCH]
        try:
            bodies.update(store.get_descriptors(chunk))
        except Exception:
            for agent_id in chunk:
                try:
                    bodies[agent_id] = store.get_descriptor(agent_id)
                except Exception as exc:  # an unreadable row becomes a diagnostic, not a failure
                    bodies[agent_id] = exc
    return bodies


def project(
    store: Store,
    root_id: str,
    descendants: bool,
    status_of: Callable[[str], Status],
    *,
    include_one_shot: bool,
    endings: bool = False,
) -> list[AgentRow]:
    """Listing rows in walk order: subagents only, one-shot children only when asked; with
    `endings` (list_agents), a ready row says how its last turn ended."""
    rows, bodies = _tree(store, root_id, descendants)
    listed: list[AgentRow] = []
    append = listed.append  # the loop below runs once per session of a possibly huge tree
    for agent_id, parent, depth, kind, label, mode, body, ended in rows:
        if kind != "subagent":
            continue  # ordinary sessions are walked through, never listed
        if not descendants:
            parent = depth = None
        if mode is None:  # no mode recorded at spawn (or changed since): read the descriptor
            described = _described(agent_id, body if bodies is None else bodies.get(agent_id))
            if isinstance(described, str):
                append(DiagnosticRow(id=agent_id, reason=described, parent=parent, depth=depth))  # type: ignore[arg-type]  # _described returns only the three reasons
                continue
            mode, label = described
        if mode == "one-shot" and not include_one_shot:
            continue
        status = status_of(agent_id)
        append(
            ChildRow(
                id=agent_id,
                label=label,
                status=status,
                mode=mode if include_one_shot else None,
                parent=parent,
                depth=depth,
                ended=_ending(status, ended) if endings else None,
            )
        )
    return listed


def _ending(status: Status, ended: str | None) -> Ended | None:
    """How a ready child's last turn ended, when storage knows it (a reason of another version
    is left out); None for the other statuses, whose rows do not say it."""
    return ended if status == "ready" and ended in texts.LAST_TURN else None  # type: ignore[return-value]  # LAST_TURN's keys are the Ended values


def children(
    store: Store,
    parent_id: str,
    owner: str,
    now: float,
    live: Callable[[str], LiveAgent | None],
    alive: Callable[[str], bool],
) -> tuple[list[AgentRow], bool] | None:
    """list_agents {scope: children} from one statement (storage's `children_listing`): each
    child's status from this process's registry, else from the valid lease of another live
    process, else ready (with how its last turn ended); its parked messages. With the rows,
    whether one of them was judged by another process's lease (which lapses by the clock, and
    whose owner may die, with nothing committed). None when some stored state cannot be read
    (the caller lists through `project` then, which reads it row by row)."""
    try:
        records = store.children_listing(parent_id, owner, now)
    except Exception:
        return None
    listed: list[AgentRow] = []
    by_lease = False
    for agent_id, label, mode, body, parked, holder, leased, ended in records:
        if mode is None:
            described = _described(agent_id, body)
            if isinstance(described, str):
                listed.append(DiagnosticRow(id=agent_id, reason=described))  # type: ignore[arg-type]  # _described returns only the three reasons
                continue
            mode, label = described
        if mode == "one-shot":
            continue
        agent = live(agent_id)
        if agent is not None:
            status: Status = agent.status
        elif holder is not None and alive(holder):
            status, by_lease = leased, True  # type: ignore[assignment]  # leases hold only statuses
        else:
            status = "ready"
            by_lease = by_lease or leased is not None or holder is not None
        listed.append(
            ChildRow(
                id=agent_id,
                label=label,  # type: ignore[arg-type]  # a recorded mode comes with its label
                status=status,
                parked=parked or None,
                ended=_ending(status, ended),
            )
        )
    return listed, by_lease


def descendants(
    store: Store,
    root_id: str,
    live: Callable[[str], LiveAgent | None],
    elsewhere: dict[str, Status],
) -> tuple[list[AgentRow], str]:
    """list_agents {scope: descendants}: the rows and their text in one pass over plain storage
    rows (a 10k-session tree builds one row object and one line per listed agent, nothing else).
    Statuses as `children`'s, with `elsewhere` the other processes' (Agents.elsewhere)."""
    rows, bodies = _tree(store, root_id, True)
    parked = store.parked_counts()
    counted = parked.get
    listed: list[AgentRow] = []
    lines: list[str] = []
    persons: dict[int, str] = {}  # rows waiting for the person: their brackets, by index
    append, line = listed.append, lines.append
    found = elsewhere.get
    ending = texts.LAST_TURN.get
    for agent_id, parent, depth, kind, label, mode, body, ended in rows:
        if kind != "subagent":
            continue  # ordinary sessions are walked through, never listed
        if mode is None:
            described = _described(agent_id, body if bodies is None else bodies.get(agent_id))
            if isinstance(described, str):
                append(DiagnosticRow(id=agent_id, reason=described, parent=parent, depth=depth))  # type: ignore[arg-type]  # _described returns only the three reasons
                line(
                    texts.LIST_DESCENDANT_DIAGNOSTIC.format(
                        id=agent_id, reason=described, parent=parent, depth=depth
                    )
                )
                continue
            mode, label = described
        if mode == "one-shot":
            continue
        agent = live(agent_id)
        status = agent.status if agent is not None else found(agent_id, "ready")
        count = counted(agent_id) if parked else None
        told = ending(ended) if status == "ready" and ended is not None else None
        append(
            ChildRow(
                id=agent_id,
                label=label,
                status=status,
                parent=parent,
                depth=depth,
                parked=count,
                ended=ended if told is not None else None,
            )
        )
        state = status if told is None else texts.LIST_ENDED.format(status=status, ended=told)
        if status == "waiting":  # whose answer it waits for
            person = _for_person(agent)
            if person is not None:
                persons[len(listed) - 1] = person
            state = person or (
                texts.LIST_WAITING if depth == 1 else texts.LIST_WAITING_FOR.format(parent=parent)
            )
        if count is not None:
            state = texts.LIST_PARKED.format(status=state, count=count)
        line(
            texts.LIST_DESCENDANT.format(
                id=agent_id, status=state, parent=parent, depth=depth, label=label
            )
        )
    if not listed:
        return listed, texts.NO_SUBAGENTS
    if not all(map(str.isprintable, lines)):  # one C pass; rare: escape and draw again
        lines = _lines([_escaped(row) for row in listed], persons)
    return listed, "\n".join(lines)


def _tree(
    store: Store, root_id: str, descendants: bool
) -> tuple[list[tuple[Any, ...]], dict[str, str | bytes | None | Exception] | None]:
    """The walk's rows with the descriptors they need, or, when some stored state cannot be
    read, the rows without them and the descriptors read one by one (failures kept)."""
    try:
        return store.tree_rows(root_id, descendants, with_descriptors=True), None
    except Exception:  # some stored state cannot be read: walk without it, then read row by row
        rows = store.tree_rows(root_id, descendants)
        unchecked = [row[0] for row in rows if row[3] == "subagent" and row[5] is None]
        return rows, read_descriptors(store, unchecked)


def _described(agent_id: str, body: str | bytes | None | Exception) -> tuple[Mode, str] | str:
    """(mode, label) of a stored descriptor, or the diagnostic reason it cannot be listed by."""
    if isinstance(body, Exception):
        return "unavailable"
    try:
        descriptor = parse_descriptor(body)
    except DescriptorProblem as problem:
        return problem.reason
    return descriptor.mode, descriptor.label


def render(rows: list[AgentRow], live: Callable[[str], LiveAgent | None] | None = None) -> str:
    """The model-visible listing: one line per row, or `(no subagents)`; `live`: this
    process's agents, whose rows say whose question to the person they wait for.

    When an id, parent or label holds anything but printable characters, the rows are drawn
    with those escaped (texts.shown): a label cannot add lines, reorder the text or hide itself."""
    if not rows:
        return texts.NO_SUBAGENTS
    persons: dict[int, str] = {}
    lines = _lines(rows, persons, live)
    if not all(map(str.isprintable, lines)):  # one C pass; rare: escape and draw again
        lines = _lines([_escaped(row) for row in rows], persons)
    return "\n".join(lines)


def _for_person(agent: LiveAgent | None) -> str | None:
    """What a waiting agent's brackets hold when a question to the person holds it (its own, or
    one below it): None when it waits for its parent's answer, or for no person."""
    if agent is None or agent.asking or not agent.person:
        return None
    if agent.agent_id in agent.person:
        return texts.LIST_WAITING_PERSON
    return texts.LIST_WAITING_BELOW.format(asker=texts.shown(agent.person[0]))


def _lines(
    rows: list[AgentRow],
    persons: dict[int, str],
    live: Callable[[str], LiveAgent | None] | None = None,
) -> list[str]:
    """The rows' lines; `persons`: the brackets of rows waiting for the person, by index (with
    `live`, those found are added to it, for a second drawing of the same rows)."""
    lines: list[str] = []
    append = lines.append
    for index, row in enumerate(rows):  # runs once per listed agent: one format per line
        if isinstance(row, ChildRow):
            form = texts.LIST_CHILD if row.depth is None else texts.LIST_DESCENDANT
            state = None
            if row.status == "waiting":
                state = persons.get(index)
                if state is None and live is not None:
                    state = _for_person(live(row.id))
                    if state is not None:
                        persons[index] = state
            append(
                form.format(
                    id=row.id,
                    status=state or _state(row),
                    parent=row.parent,
                    depth=row.depth,
                    label=row.label,
                )
            )
        else:
            form = texts.LIST_DIAGNOSTIC if row.depth is None else texts.LIST_DESCENDANT_DIAGNOSTIC
            append(form.format(id=row.id, reason=row.reason, parent=row.parent, depth=row.depth))
    return lines


def _state(row: ChildRow) -> str:
    """What a row's brackets hold: `ready`, `ready, last turn completed`, `idle, 2 parked`,
    `idle, held: turns budget spent`."""
    if row.status == "waiting":  # its question is open: whose answer it waits for
        if row.depth is None or row.depth == 1:
            return texts.LIST_WAITING
        return texts.LIST_WAITING_FOR.format(parent=row.parent)
    if row.ended is None and row.parked is None and row.held is None:
        return row.status
    state: str = row.status
    if row.ended is not None:
        state = texts.LIST_ENDED.format(status=state, ended=texts.LAST_TURN[row.ended])
    if row.parked is not None:
        state = texts.LIST_PARKED.format(status=state, count=row.parked)
    if row.held is not None:
        why = texts.held_why(row.id, row.held.budget, row.held.agent_id)
        state = texts.LIST_HELD.format(status=state, why=why)
    return state


def with_held(
    rows: list[AgentRow], held_tree: Callable[[str], Held | None]
) -> list[AgentRow] | None:
    """The rows with `held` set on each idle row whose tree a spent budget holds (copies: the
    rows given may be kept listings), or None when that changes nothing."""
    changed: list[AgentRow] | None = None
    for index, row in enumerate(rows):
        if isinstance(row, ChildRow) and row.status == "idle":
            held = held_tree(row.id)
            if held != row.held:
                if changed is None:
                    changed = list(rows)
                changed[index] = msgspec.structs.replace(row, held=held)
    return changed


def _escaped(row: AgentRow) -> AgentRow:
    shown = texts.shown
    parent = shown(row.parent) if row.parent is not None else None
    if isinstance(row, ChildRow):
        return msgspec.structs.replace(row, id=shown(row.id), label=shown(row.label), parent=parent)
    return msgspec.structs.replace(row, id=shown(row.id), parent=parent)


def mark_parked(store: Store, rows: list[AgentRow]) -> list[AgentRow]:
    """Parked messages made visible in listings, `[idle, 2 parked]` (PROTOCOL.md section 5): set
    `parked` on the rows of agents holding parked messages (few: one indexed query)."""
    counts = store.parked_counts()
    if counts:
        for row in rows:
            if isinstance(row, ChildRow) and row.id in counts:
                row.parked = counts[row.id]
    return rows
