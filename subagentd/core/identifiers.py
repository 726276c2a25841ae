"""The agent-id rule (schema/base.py ID_RULE), checked in full where a new session is created."""

from __future__ import annotations

import re

from subagentd.core import texts
from subagentd.errors import InvalidParamsError
from subagentd.schema.base import ID_FORBIDDEN, ID_RULE, MAX_ID_BYTES

# The schema's pattern holds the BMP ranges; tag characters (U+E0000-E007F) are invisible too.
_forbidden = re.compile(f"[{ID_FORBIDDEN}\\U000e0000-\\U000e007f]").search


def check_new_id(field: str, value: str) -> None:
    """Refuse a new agent id that breaks the rule (-32602, naming the rule it breaks).

    The Struct types carry the same rule for the schema, but a regex `$` also matches before a
    trailing newline and lengths there count characters, so this is the full check."""
    problem = None
    if not value:
        problem = texts.ID_EMPTY
    elif value[0] == "@":
        problem = texts.ID_RESERVED
    elif len(value) > MAX_ID_BYTES or len(value.encode()) > MAX_ID_BYTES:
        problem = texts.ID_TOO_LONG.format(limit=MAX_ID_BYTES)
    else:
        found = _forbidden(value)
        if found is not None:
            problem = texts.ID_FORBIDDEN_CHARACTER.format(
                code=ord(found.group()), index=found.start()
            )
    if problem is not None:
        raise InvalidParamsError(
            texts.ID_REFUSED.format(field=field, problem=problem, rule=ID_RULE)
        )
