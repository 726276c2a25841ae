"""The tools' arguments in the clients' READMEs are what subagentd/mcp/tool_reference.py
generates from the tools' schema: regenerated, nothing changes."""

from __future__ import annotations

import pytest

from subagentd.mcp import tool_reference
from subagentd.mcp.tools import TOOLS


@pytest.mark.parametrize("path", tool_reference.TARGETS, ids=lambda p: p.name)
def test_each_readme_lists_every_tools_arguments_as_generated(path):
    text = path.read_text()
    assert tool_reference.rewritten(text, tool_reference.render()) == text, (
        f"{path} is stale: run `python -m subagentd.mcp.tool_reference`"
    )
    for name, spec in TOOLS.items():
        assert f"**`{name}`**" in text
        for field in spec.args.__struct_encode_fields__:
            assert f"| `{field}` |" in text, (name, field)


def test_the_check_fails_on_a_stale_block(tmp_path, monkeypatch):
    stale = tmp_path / "README.md"
    stale.write_text(f"intro\n{tool_reference.START}\nold\n{tool_reference.END}\n")
    monkeypatch.setattr(tool_reference, "TARGETS", (stale,))
    assert tool_reference.main(["--check"]) == 1
    assert tool_reference.main([]) == 0
    assert tool_reference.main(["--check"]) == 0
    assert stale.read_text().startswith(f"intro\n{tool_reference.render()}")
