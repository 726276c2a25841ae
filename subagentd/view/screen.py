"""One frame of `subagentd watch`: the tree, collapsed to fit the rows there are.

Busy agents (a turn open, messages queued or parked) are always kept; idle subtrees fold into
one line, long runs of idle siblings into a count, and what still does not fit into a last line.
Model-written text (ids, labels, event summaries) is shown escaped, never as markup.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from subagentd.view.inspect import DRAWN_LEVELS, SessionRow, short
from subagentd.view.snapshot import Last, Snapshot
from subagentd.view.terminal import printable

SIBLINGS_SHOWN = 8  # past this many siblings (when the tree does not fit), idle ones fold
IDLE_SHOWN = 2  # the latest idle siblings kept beside the busy ones (when they fit)
TOO_MANY = "give a ROOT, or use a taller terminal"
STATUS_STYLE = {"open turn": "bold blue", "ready": "green", "waiting": "bold yellow"}


@dataclass(slots=True)
class Node:
    session: SessionRow
    kids: list[Node] = field(default_factory=list)
    size: int = 1  # sessions in this subtree
    busy: int = 0  # busy sessions in this subtree


def busy(s: SessionRow) -> bool:
    return s.status == "open turn" or s.queued > 0 or s.parked > 0


def build_tree(sessions: dict[str, SessionRow]) -> list[Node]:
    """Roots (and orphans, and cycle members) with their children in creation order."""
    ordered = sorted(sessions.values(), key=lambda s: (s.created_at, s.id))
    nodes = {s.id: Node(s) for s in ordered}
    roots: list[Node] = []
    for node in nodes.values():  # in creation order, so every list of children is too
        parent = node.session.parent_id
        if parent is None or parent not in nodes or parent == node.session.id:
            roots.append(node)
        else:
            nodes[parent].kids.append(node)
    # parents before children, without recursion (deep chains); then sizes bottom-up
    walk: list[Node] = []
    reached: set[str] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node.session.id not in reached:
            reached.add(node.session.id)
            walk.append(node)
            stack.extend(node.kids)
    for node in reversed(walk):
        node.busy += busy(node.session)
        for kid in node.kids:
            node.size += kid.size
            node.busy += kid.busy
    # parent cycles leave members unreached: show them as roots
    roots += [n for n in nodes.values() if n.session.id not in reached]
    return roots


@dataclass(slots=True)
class Row:
    prefix: str
    node: Node | None = None
    folded: str = ""  # a summary line instead of a session
    detail: str = ""  # what the folded agents ended with
    agents: int = 1  # how many agents the row stands for


@dataclass(slots=True)
class Fold:
    """Idle siblings drawn as one line."""

    nodes: list[Node]

    def text(self) -> str:
        return f"… {len(self.nodes)} more idle"

    def detail(self) -> str:
        ends: dict[str, int] = {}
        stack = list(self.nodes)
        while stack:
            node = stack.pop()
            reason = node.session.last_reason or "no turn yet"
            ends[reason] = ends.get(reason, 0) + 1
            stack.extend(node.kids)
        listed = ", ".join(f"{n} {r}" for r, n in sorted(ends.items(), key=lambda e: -e[1]))
        return f"{sum(ends.values())} agent(s): {listed}"


def lay_out(roots: list[Node], budget: int) -> list[Row]:
    """Rows for at most `budget` lines: everything when it fits; else idle subtrees and runs of
    idle siblings folded, keeping the latest idle ones if there is room; else cut at the end."""
    for idle_shown in (None, IDLE_SHOWN, 0):
        rows, hidden = _rows(roots, budget, idle_shown)
        if not hidden:
            return rows
    rows[-1:] = [Row("", folded=f"… {hidden} more agent(s) not shown", detail=TOO_MANY)]
    return rows


def _rows(roots: list[Node], budget: int, idle_shown: int | None) -> tuple[list[Row], int]:
    """One layout (idle_shown None: nothing folded) and how many agents did not fit."""
    rows: list[Row] = []
    # (node or fold, prefix, last sibling, depth), popped in drawing order: no recursion
    pending = list(reversed(_siblings(roots, idle_shown, "", 0)))
    while pending and len(rows) <= budget:
        item, prefix, last, depth = pending.pop()
        branch = "" if depth == 0 else ("└─ " if last else "├─ ")
        if len(prefix) > DRAWN_LEVELS * 3:  # a deep chain: its last levels
            prefix = "…" + prefix[-DRAWN_LEVELS * 3 :]
        if isinstance(item, Fold):
            size = sum(n.size for n in item.nodes)
            rows.append(Row(prefix + branch, folded=item.text(), detail=item.detail(), agents=size))
            continue
        rows.append(Row(prefix + branch, item))
        if idle_shown is not None and item.busy == 0 and item.size > 1:
            rows[-1].folded = f"+{item.size - 1} below, all idle"
            rows[-1].agents = item.size
            continue
        below = prefix + ("" if depth == 0 else ("   " if last else "│  "))
        pending.extend(reversed(_siblings(item.kids, idle_shown, below, depth + 1)))
    if len(rows) <= budget:
        return rows, 0
    cut = rows[budget - 1 :]
    hidden = sum(
        item.size if isinstance(item, Node) else sum(n.size for n in item.nodes)
        for item, *_ in pending
    )
    hidden += sum(r.agents for r in cut)
    return rows[:budget], hidden


def _siblings(
    kids: list[Node], idle_shown: int | None, prefix: str, depth: int
) -> list[tuple[Node | Fold, str, bool, int]]:
    """The children to draw, in order: all, or the busy ones, the latest idle ones, a fold."""
    shown: list[Node | Fold] = list(kids)
    if idle_shown is not None and len(kids) > SIBLINGS_SHOWN:
        idle = [k for k in kids if k.busy == 0]
        kept = set(map(id, idle[len(idle) - idle_shown :]))
        shown = [k for k in kids if k.busy or id(k) in kept]
        hidden = [k for k in idle if id(k) not in kept]
        if hidden:
            shown.append(Fold(hidden))
    return [(item, prefix, i == len(shown) - 1, depth) for i, item in enumerate(shown)]


def ago(at: float | None, now: float) -> str:
    if at is None:
        return ""
    span = max(now - at, 0.0)
    if span < 60:
        return f"{span:.1f}s"
    if span < 3600:
        return f"{int(span // 60)}m{int(span % 60):02d}s"
    return f"{int(span // 3600)}h{int(span % 3600 // 60):02d}m"


def frame(snapshot: Snapshot, title: str, height: int, now: float | None = None) -> RenderableType:
    """The whole screen: a header line and the tree table, `height` lines at most."""
    now = time.time() if now is None else now
    sessions = snapshot.shown()
    running = sum(1 for s in sessions.values() if s.status == "open turn")
    queued = sum(s.queued for s in sessions.values())
    parked = sum(s.parked for s in sessions.values())
    tokens = sum(s.tokens for s in sessions.values())
    header = Text(printable(title), style="bold")
    header.append(
        f"  {len(sessions)} agent(s): {running} in a turn, {len(sessions) - running} ready;"
        f" {queued} queued, {parked} parked, {tokens} tokens"
        f"  · {time.strftime('%H:%M:%S', time.localtime(now))}",
        style="dim",
    )
    if snapshot.root is not None and snapshot.root not in sessions:
        header.append(f"\nno agent {printable(snapshot.root)!r} (yet)", style="yellow")
    table = Table(box=None, pad_edge=False, expand=True, show_edge=False, padding=(0, 1))
    table.add_column("agent", no_wrap=True, overflow="ellipsis", ratio=3)
    table.add_column("status", no_wrap=True)
    table.add_column("queued", justify="right", no_wrap=True)
    table.add_column("parked", justify="right", no_wrap=True)
    table.add_column("turn", justify="right", no_wrap=True)
    with_usage = any(s.tokens or s.cost for s in sessions.values())  # only once a host reports it
    if with_usage:
        table.add_column("used", justify="right", no_wrap=True)
    table.add_column("last event", no_wrap=True, overflow="ellipsis", ratio=4)
    waiting = snapshot.waiting()
    for row in lay_out(build_tree(sessions), max(height - 3, 1)):
        row_cells = cells(row, snapshot.last, now, waiting)
        table.add_row(*(row_cells if with_usage else row_cells[:5] + row_cells[6:]))
    return Group(header, table)


def cells(
    row: Row, last: dict[str, Last], now: float, waiting: set[str] | frozenset[str] = frozenset()
) -> tuple[Text, ...]:
    if row.node is None:
        blank = Text("")
        fold = Text(row.prefix + printable(row.folded), style="dim")
        return (fold, blank, blank, blank, blank, blank, Text(row.detail, style="dim"))
    s = row.node.session
    name = Text(row.prefix, style="dim")
    name.append(printable(s.id), style="bold" if busy(s) else "")
    if s.label:
        name.append(" " + printable(short(s.label, 30)), style="cyan")
    if s.remote:  # a remote child: its turns run on that A2A agent
        name.append(" @a2a:" + printable(short(s.remote, 20)), style="magenta")
    if row.folded:
        name.append(f" ({row.folded})", style="dim")
    seen = last.get(s.id, Last())
    # its question, or one to the person below it (Snapshot.waiting)
    shown = "waiting" if s.status == "open turn" and (seen.waiting or s.id in waiting) else s.status
    status = Text(shown, style=STATUS_STYLE.get(shown, ""))
    if s.status == "ready" and s.last_reason:
        status.append(f" ({s.last_reason})", style="dim")
    turn = ago(seen.turn_started, now) if s.status == "open turn" else ""
    event = Text(printable(seen.kind), style="magenta")
    if seen.at is not None:
        event.append(f" {ago(seen.at, now)} ago", style="dim")
    summary = seen.summary
    if summary.startswith(seen.kind + " "):  # "settled (last turn …)": the kind is said once
        summary = summary[len(seen.kind) + 1 :]
    if summary:
        event.append(" " + printable(short(summary, 120)))
    return (
        name,
        status,
        Text(str(s.queued) if s.queued else "·", style="yellow" if s.queued else "dim"),
        Text(str(s.parked) if s.parked else "·", style="red" if s.parked else "dim"),
        Text(turn, style="blue"),
        Text(used(s), style="green" if s.tokens or s.cost else "dim"),
        event,
    )


def used(s: SessionRow) -> str:
    """What its own turns reported: tokens (k past ten thousand) and cost, `·` when nothing."""
    if not s.tokens and not s.cost:
        return "·"
    tokens = f"{s.tokens / 1000:.0f}k" if s.tokens >= 10_000 else str(s.tokens)
    return tokens + (f" {s.cost:g}" if s.cost else "")
