"""tools/call results: structuredContent is built one level deep (rows encode themselves later),
and must put exactly the same JSON on the wire as a full conversion of the result would; it holds
the content's text too."""

from __future__ import annotations

import msgspec

from subagentd.mcp.tools import call_tool_result
from subagentd.schema.listing import ChildRow, DiagnosticRow
from subagentd.schema.tools import (
    InterruptAgentResult,
    ListAgentsResult,
    ReportResult,
    SendMessageResult,
)

RESULTS = [
    SendMessageResult(text="sent", message_id="m1"),
    ReportResult(text="reported", message_id="m2"),
    InterruptAgentResult(text="done", accepted=True),
    InterruptAgentResult(text="done", accepted=True, previous_status="running"),
    ListAgentsResult(text="(no subagents)", agents=[]),
    ListAgentsResult(
        text="rows",
        agents=[
            ChildRow(id="c1", label="one", status="idle", parent="root", depth=1),
            DiagnosticRow(id="c2", reason="corrupt"),
        ],
    ),
]


def test_structured_content_is_the_whole_result_with_its_text_exactly_as_on_the_wire():
    for result in RESULTS:
        expected = msgspec.to_builtins(result)
        text = expected["text"]  # both sides carry the text (PROTOCOL.md section 5)
        wire = msgspec.json.decode(msgspec.json.encode(call_tool_result(result, None)))
        assert wire == {
            "content": [{"type": "text", "text": text}],
            "structuredContent": expected,
            "isError": False,
        }
