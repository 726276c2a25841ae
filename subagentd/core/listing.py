"""The list_agents projection (SEMANTICS.md section 6): rows from storage, status from the registry."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from subagentd.core import texts
from subagentd.core.descriptors import DescriptorProblem, parse_descriptor
from subagentd.core.store import Store
from subagentd.schema.listing import AgentRow, ChildRow, DiagnosticRow, Status

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
) -> list[AgentRow]:
    """Listing rows in walk order: subagents only, one-shot children only when asked."""
    bodies: dict[str, str | bytes | None | Exception] | None = None
    try:
        rows = store.tree(root_id, descendants, with_descriptors=True)
    except Exception:  # some stored state cannot be read: walk without it, then read row by row
        rows = store.tree(root_id, descendants)
        unchecked = [row.id for row in rows if row.kind == "subagent" and row.mode is None]
        bodies = read_descriptors(store, unchecked)
    listed: list[AgentRow] = []
    append = listed.append  # the loop below runs once per session of a possibly huge tree
    for row in rows:
        if row.kind != "subagent":
            continue  # ordinary sessions are walked through, never listed
        parent = row.parent_id if descendants else None
        depth = row.depth if descendants else None
        mode, label = row.mode, row.label
        if mode is None:  # no mode recorded at spawn (or changed since): read the descriptor
            body = row.descriptor if bodies is None else bodies.get(row.id)
            if isinstance(body, Exception):
                append(DiagnosticRow(id=row.id, reason="unavailable", parent=parent, depth=depth))
                continue
            try:
                descriptor = parse_descriptor(body)
            except DescriptorProblem as problem:
                append(DiagnosticRow(id=row.id, reason=problem.reason, parent=parent, depth=depth))  # type: ignore[arg-type]  # parse_descriptor raises only "corrupt" or "unsupported"
                continue
            mode, label = descriptor.mode, descriptor.label
        if mode == "one-shot" and not include_one_shot:
            continue
        append(
            ChildRow(
                id=row.id,
                label=label,  # type: ignore[arg-type]  # a recorded mode comes with its label (storage _RECORDED); a descriptor's label is required
                status=status_of(row.id),
                mode=mode if include_one_shot else None,
                parent=parent,
                depth=depth,
            )
        )
    return listed


def render(rows: list[AgentRow]) -> str:
    """The model-visible listing: one line per row, or `(no subagents)`.

    When an id, parent or label holds anything but printable characters, the rows are drawn
    with those escaped (texts.shown): a label cannot add lines, reorder the text or hide itself."""
    if not rows:
        return texts.NO_SUBAGENTS
    lines = _lines(rows)
    if not all(map(str.isprintable, lines)):  # one C pass; rare: escape and draw again
        lines = _lines([_escaped(row) for row in rows])
    return "\n".join(lines)


def _lines(rows: list[AgentRow]) -> list[str]:
    lines: list[str] = []
    append = lines.append
    for row in rows:  # runs once per listed agent: one format per line
        if row.depth is None:
            if isinstance(row, ChildRow):
                status = row.status if row.parked is None else f"{row.status}, {row.parked} parked"
                append(f"{row.id} [{status}] — {row.label}")
            else:
                append(f"{row.id} [diagnostic: {row.reason}]")
        elif isinstance(row, ChildRow):
            status = row.status if row.parked is None else f"{row.status}, {row.parked} parked"
            append(f"{row.id} [{status}] parent={row.parent} depth={row.depth} — {row.label}")
        else:
            append(f"{row.id} [diagnostic: {row.reason}] parent={row.parent} depth={row.depth}")
    return lines


def _escaped(row: AgentRow) -> AgentRow:
    shown = texts.shown
    parent = shown(row.parent) if row.parent is not None else None
    if isinstance(row, ChildRow):
        return msgspec.structs.replace(row, id=shown(row.id), label=shown(row.label), parent=parent)
    return msgspec.structs.replace(row, id=shown(row.id), parent=parent)
