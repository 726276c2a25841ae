"""The watched tree, kept current by reading only what changed since the last look.

SQLite's `PRAGMA data_version` on the watcher's own read-only connection says whether any other
connection committed; only then are the new events and inbox rows read (ranges of their primary
keys), and only the sessions they touch are read again. Nothing here writes or holds a lock
between looks, so a serving process's writes never wait for the watcher.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from subagentd.storage.reader import EventRow, StoreReader
from subagentd.view.inspect import SessionRow, load, summarize
from subagentd.view.timeline import millis, subtree

FULL_RELOAD_SHARE = 0.5  # past this share of sessions touched, read everything again


@dataclass(slots=True)
class Last:
    """A session's latest event, summarized once, and when its open turn started."""

    kind: str = ""
    summary: str = ""
    at: float | None = None  # epoch seconds
    turn_started: float | None = None
    waiting: bool = False  # its question is open (a `question` event, no `question_end` yet)
    person: bool = False  # that question is to the person (ask_user): those above it wait too


class Snapshot:
    """Every session of the watched tree (or of the whole database), with its last event."""

    def __init__(self, reader: StoreReader, root: str | None = None) -> None:
        self.reader = reader
        self.root = root
        self.sessions: dict[str, SessionRow] = {}
        self.last: dict[str, Last] = {}
        self.seq = 0
        self.position = 0
        self.version = -1
        self.reads = 0  # how many looks found a change (for tests and the header)
        self.reload()

    def reload(self) -> None:
        """Read everything (at start, and when most of the tree changed at once)."""
        # where the reads start, taken first: what commits during them is read again next look
        self.version = self.reader.data_version()
        seq, position = self.reader.last_seq(), self.reader.last_position()
        self.sessions = load(self.reader)
        self.last = {}
        for row in self.reader.last_events():
            self.note(row)
        self.seq, self.position = seq, position
        opened = [s.id for s in self.sessions.values() if s.status == "open turn"]
        for sid, at in self.reader.turn_starts(opened).items():
            self.last.setdefault(sid, Last()).turn_started = seconds(at)
        self.reads += 1

    def refresh(self) -> bool:
        """Catch up with what other connections committed; False when nothing did."""
        version = self.reader.data_version()  # before the reads: a commit during them is seen
        if version == self.version:
            return False
        self.version = version
        events = self.reader.events_after(self.seq)
        messages = self.reader.messages_after(self.position)
        touched = {row[0] for row in events} | {row[2] for row in messages}
        if len(touched) > max(len(self.sessions) * FULL_RELOAD_SHARE, 64):
            self.reload()
            return True
        if messages:
            self.position = messages[-1][0]
        for row in events:
            self.note(row)
        if touched:
            self.sessions.update(load(self.reader, only=touched))
        self.reads += 1
        return True

    def note(self, row: EventRow) -> None:
        session_id, seq, _turn_id, kind, raw, at = row
        self.seq = max(self.seq, seq)
        last = self.last.setdefault(session_id, Last())
        try:
            data = json.loads(raw) if raw is not None else None
        except (ValueError, TypeError):
            data = raw
        last.kind, last.summary, last.at = kind, summarize(kind, data), seconds(at)
        if kind == "turn_start":
            last.turn_started = last.at
        elif kind == "turn_end":
            last.turn_started = None
        if kind == "question":
            last.waiting = True
            last.person = isinstance(data, dict) and data.get("to") == "user"
        elif kind in ("question_end", "turn_start", "turn_end"):
            last.waiting = last.person = False

    def waiting(self) -> set[str]:
        """The sessions shown `waiting` when in a turn: those whose question is open, and every
        session above one whose question is to the person."""
        found: set[str] = set()
        above: set[str] = set()  # walked up to once (a parent cycle in corrupt data ends it)
        for session_id, last in self.last.items():
            if not last.waiting:
                continue
            found.add(session_id)
            session = self.sessions.get(session_id) if last.person else None
            parent = session.parent_id if session is not None else None
            while parent is not None and parent not in above:
                above.add(parent)
                session = self.sessions.get(parent)
                parent = session.parent_id if session is not None else None
        return found | above

    def shown(self) -> dict[str, SessionRow]:
        """The sessions to draw: all, or the tree below the root asked for."""
        if self.root is None:
            return self.sessions
        return subtree(self.sessions, self.root)


def seconds(at: str | None) -> float | None:
    ms = millis(at)
    return None if ms is None else ms / 1000
