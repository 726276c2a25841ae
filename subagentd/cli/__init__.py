"""Command line: `subagentd [serve]`, `demo`, `inspect`, `watch`, `schema`, `stats`, `prune`.

A plain serve invocation starts without importing click (fastpath.py); everything else goes
through the click commands (commands.py). The demo host (`demo.py`) is a host like any other:
it speaks to a served subagentd through the client."""

from __future__ import annotations

import os
import sys

from subagentd.cli.caller import open_default_caller

__all__ = ["main", "open_default_caller"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    from subagentd.cli.fastpath import read_serve

    options = read_serve(args, os.environ)
    if options is not None and options.pop("version"):
        from subagentd.cli.table import VERSION

        print(VERSION)
        return 0
    if options is not None:
        from subagentd.cli.serving import serve
        from subagentd.cli.table import default_database

        options["db"] = options["db"] or default_database()
        return serve(options)
    from subagentd.cli.commands import run

    return run(args)
