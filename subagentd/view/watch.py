"""`subagentd watch`: the live tree beside a running server, redrawn when the database changes.

The watcher looks at `PRAGMA data_version` (on PostgreSQL, the server's transaction snapshot:
storage/postgres/reading.py) every LOOK seconds (no table is read while nothing changed) and redraws within one look of a commit (a frame of 10k agents takes ~80 ms, so looks
are spaced by at least a frame's cost); the clocks of open turns tick once a second.
rich (the `watch` extra) draws it.
"""

from __future__ import annotations

import sys
import time

from subagentd.storage.reader import StoreReader, UnreadableDatabaseError

LOOK = 0.05  # seconds between data_version checks: a change is drawn within ~50 ms plus a read
TICK = 1.0  # seconds between redraws when nothing changed (turn clocks)


def run(path: str, root: str | None, once: bool) -> int:
    """Show the tree of the database at `path` (or below `root`); the exit status."""
    from subagentd.extras import missing

    line = missing("watch", "subagentd watch")
    if line is not None:
        print(f"cannot start: {line}", file=sys.stderr)
        return 1  # as every command a missing extra stops
    from rich.console import Console, RenderableType
    from rich.live import Live

    from subagentd.view.screen import frame
    from subagentd.view.snapshot import Snapshot

    try:
        reader = StoreReader(path)
    except UnreadableDatabaseError as exc:
        print(f"subagentd watch: {exc}", file=sys.stderr)
        return 2
    path = reader.name  # a PostgreSQL URL is shown without its password
    title = f"subagentd watch {path}" + (f" below {root}" if root else "")
    console = Console(highlight=False)
    try:
        snapshot = Snapshot(reader, root)
        if once:
            console.print(frame(snapshot, title, console.size.height))
            return 0

        def draw() -> RenderableType:
            return frame(snapshot, title, console.size.height)

        with Live(draw(), console=console, screen=True, auto_refresh=False) as screen:
            drawn, cost = time.monotonic(), 0.0
            while True:
                time.sleep(max(LOOK, cost))  # a big tree's frame costs more: half a CPU at most
                if snapshot.refresh() or time.monotonic() - drawn >= TICK:
                    began = time.monotonic()
                    screen.update(draw(), refresh=True)
                    drawn = time.monotonic()
                    cost = drawn - began
    except reader.errors as exc:
        print(f"subagentd watch: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    finally:
        reader.close()
