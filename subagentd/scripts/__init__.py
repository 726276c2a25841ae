"""Scripted transcripts: JSON-RPC conversations with subagentd, replayed and recorded.

`format` holds the transcript format (steps, placeholders, matching; docs/scripts.md), `replay`
runs transcripts against a fresh subagentd (`subagentd replay`), `record` turns a served session's
frames into a transcript (`subagentd serve --record`). Like the client, this package speaks the
wire only: it imports `subagentd.client` and `subagentd.schema`, never the server's insides.
"""

from subagentd.scripts.format import (
    FORMAT_VERSION,
    STEP_SCHEMA,
    Mismatch,
    ScriptError,
    Step,
    load,
    match,
    parse,
    substitute,
)
from subagentd.scripts.replay import Outcome, replay

__all__ = [
    "FORMAT_VERSION",
    "STEP_SCHEMA",
    "Mismatch",
    "Outcome",
    "ScriptError",
    "Step",
    "load",
    "match",
    "parse",
    "replay",
    "substitute",
]
