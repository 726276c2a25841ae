"""`subagentd replay`: run transcripts, print each one's result, write JUnit XML, set the status."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def run_replay(
    scripts: Sequence[str],
    serve_args: list[str],
    *,
    db: str,
    timeout: float,
    update: bool,
    junit: str | None,
) -> int:
    """0 when every transcript passed (or, with update, was rewritten), else 1."""
    from subagentd.private_files import write_private
    from subagentd.scripts.junit import junit as junit_xml
    from subagentd.scripts.replay import replay

    outcomes = []
    out = sys.stdout
    for name in scripts:
        outcome = replay(name, serve_args, db=db, timeout=timeout, update=update)
        outcomes.append(outcome)
        if outcome.failure is not None:
            out.write(f"FAIL {outcome.failure}\n")
        elif update and outcome.changed and outcome.updated is not None:
            Path(name).write_text("\n".join(outcome.updated) + "\n", encoding="utf-8")
            out.write(f"updated {name} ({outcome.steps} steps, {outcome.seconds:.1f} s)\n")
        else:
            said = "unchanged" if update else "ok"
            out.write(f"{said} {name} ({outcome.steps} steps, {outcome.seconds:.1f} s)\n")
        out.flush()
    failed = sum(1 for o in outcomes if not o.passed)
    out.write(f"{len(outcomes) - failed} passed, {failed} failed\n")
    if junit is not None:
        write_private(junit, junit_xml(outcomes), encoding="utf-8", errors="backslashreplace")
    return 1 if failed else 0
