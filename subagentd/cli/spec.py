"""One command-line option as data (table.py lists them; options.py and fastpath.py read them)."""

from __future__ import annotations

import re

import msgspec

# A duration's units, in seconds. Every duration option takes them (30d, 12h, 90m, 45s, 2w, 500ms);
# a bare number is read in the option's own unit (its `bare`), or refused where it has none.
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
UNIT_NAMES = {"s": "seconds", "d": "days"}
_DURATION = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*(ms|[smhdw]?)\s*")


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
    bare: str = "s"  # a duration's unit for a bare number ("s", "d"); "" means a unit is required

    @property
    def dest(self) -> str:
        return self.name[2:].replace("-", "_")


def read_duration(text: str, bare: str = "") -> float:
    """A duration (`30d`, `90m`, `45s`, `500ms`; a bare number in the unit `bare`) in that unit
    (seconds when `bare` is ""); ValueError saying what is wrong."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m, 45s or 500ms")
    number, unit = match[1], match[2] or bare
    if not unit:
        raise ValueError(
            f"{text!r} has no unit: write {number}d (days), {number}h, {number}m or {number}s"
        )
    return float(number) * UNITS[unit] / UNITS[bare or "s"]
