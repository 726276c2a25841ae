"""`subagentd inspect --html`: the timeline as one self-contained HTML file (no network, no assets).

The page is timeline.html (its CSS and JavaScript inline) with the run's data put in as JSON.
"""

from __future__ import annotations

import html
import json
import sys
import time
from importlib.resources import files
from typing import Any

from subagentd.private_files import write_private
from subagentd.storage.reader import StoreReader
from subagentd.view.inspect import open_reader
from subagentd.view.timeline import build

DATA_MARK = "/*DATA*/null"
TITLE_MARK = "<!--TITLE-->"


def render(timeline: dict[str, Any], title: str) -> str:
    """The page with `timeline` embedded; every `<` (and `>`, `&`) is written as a JSON escape,
    so no text can close the script, nor open a comment (`<!--`) that would swallow it: the
    HTML parser never sees one of them inside the script."""
    template = files("subagentd.view").joinpath("timeline.html").read_text(encoding="utf-8")
    data = (
        json.dumps(timeline, ensure_ascii=True, separators=(",", ":"))
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )
    return template.replace(TITLE_MARK, html.escape(title)).replace(DATA_MARK, data)


def write_page(reader: StoreReader, path: str, out: str, root: str | None) -> int:
    """Write the page for the database at `path` (or the tree below `root`) to `out`; the number
    of agents drawn."""
    timeline = build(reader, root)
    title = f"subagentd timeline: {path}" + (f" below {root}" if root else "")
    text = render(timeline, title)
    write_private(out, text, encoding="utf-8")  # the conversation: private (private_files.py)
    return len(timeline["agents"])


def run(path: str, root: str | None, out: str) -> int:
    """`subagentd inspect --html OUT [ROOT]`: the exit status; one line on stderr says what was
    written (stdout stays empty)."""
    began = time.monotonic()
    reader = open_reader(path)
    if reader is None:
        return 2
    path = reader.name  # a PostgreSQL URL is shown without its password
    try:
        if root is not None and reader.get_session(root) is None:
            print(f"subagentd inspect: no agent {root!r} in {path}", file=sys.stderr)
            return 1
        drawn = write_page(reader, path, out, root)
    except reader.errors as exc:
        print(f"subagentd inspect: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"subagentd inspect: cannot write {out}: {exc}", file=sys.stderr)
        return 1
    finally:
        reader.close()
    took = time.monotonic() - began
    print(f"wrote {out}: {drawn} agent(s) in {took:.2f}s", file=sys.stderr)
    return 0
