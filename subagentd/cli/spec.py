"""One command-line option as data (table.py lists them; options.py and fastpath.py read them)."""

from __future__ import annotations

import msgspec


class Spec(msgspec.Struct, frozen=True):
    """One option: kind is str, int, float, choice, tools (ToolSet) or duration (Duration)."""

    name: str
    kind: str
    default: object
    help: str
    low: float | None = None  # the least value allowed
    high: float | None = None  # the greatest value allowed
    low_open: bool = False  # the value must be more than `low`
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    default_shown: str | None = None  # in --help, when `default` is not what to show

    @property
    def dest(self) -> str:
        return self.name[2:].replace("-", "_")
