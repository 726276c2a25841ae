"""The tools' schemas as the agent frameworks convert them for their providers (PROTOCOL.md
section 5, portable tool schemas): openai-agents' strict schema, pydantic-ai's OpenAI (strict)
and Gemini transformers, LangChain's `convert_to_openai_tool(strict=True)` (in its own
environment), OpenAI's strict rules and a Gemini-style check; titles and annotations."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
from agents.strict_schema import ensure_strict_json_schema
from pydantic_ai.profiles.google import GoogleJsonSchemaTransformer
from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer

from subagentd.core.arguments import check_arguments
from subagentd.mcp.tools import TOOLS, tool_definitions
from tests.frameworks.environment import run_script

TOOL_LIST = [msgspec.to_builtins(t) for t in tool_definitions(tuple(TOOLS))]


def walk(node: Any, path: str = "$"):
    """Every (path, schema object) below node."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def gemini_problems(schema: dict[str, Any]) -> list[str]:
    """What a Gemini function declaration refuses: a property (or anyOf branch) without a
    `type`, an enum on anything but a string."""
    problems = []
    for path, node in walk(schema):
        for name, prop in (node.get("properties") or {}).items():
            branches = prop.get("anyOf", [prop])
            for branch in branches:
                if "type" not in branch:
                    problems.append(f"{path}.properties.{name}: no type")
                if "enum" in branch and branch.get("type") != "string":
                    problems.append(f"{path}.properties.{name}: enum on {branch.get('type')}")
    return problems


def strict_problems(parameters: dict[str, Any]) -> list[str]:
    """What OpenAI's strict mode (and Azure OpenAI's) refuses: `default` anywhere, an object
    that does not list every property as required or allows extra properties."""
    problems = []
    for path, node in walk(parameters):
        if "default" in node and path.split(".")[-1] != "properties":
            problems.append(f"{path}: default")
        if node.get("type") == "object":
            if node.get("additionalProperties") is not False:
                problems.append(f"{path}: additionalProperties")
            if sorted(node.get("required", [])) != sorted(node.get("properties", {})):
                problems.append(f"{path}: not every property required")
    return problems


def test_every_parameter_is_typed_and_no_optional_one_has_a_default():
    assert [t["name"] for t in TOOL_LIST] == list(TOOLS)
    for tool in TOOL_LIST:
        schema = tool["inputSchema"]
        assert gemini_problems(schema) == [], tool["name"]
        required = set(schema["required"])
        for name, prop in schema["properties"].items():
            assert "default" not in prop, (tool["name"], name)
            assert prop["description"], (tool["name"], name)
            if name not in required:  # optional: nullable, and null counts as absent
                assert prop["anyOf"][-1] == {"type": "null"}, (tool["name"], name)
    by_name = {t["name"]: t["inputSchema"]["properties"] for t in TOOL_LIST}
    assert by_name["list_agents"]["scope"]["anyOf"] == [
        {"enum": ["children", "descendants"], "type": "string"},
        {"type": "null"},
    ]
    assert by_name["wait_agents"]["timeout_ms"]["anyOf"] == [
        {"type": "integer", "minimum": 0, "maximum": 50000},
        {"type": "null"},
    ]


def test_the_output_schemas_type_their_enums_too():
    for tool in TOOL_LIST:
        assert gemini_problems(tool["outputSchema"]) == [], tool["name"]
        assert tool["outputSchema"]["properties"]["text"]["type"] == "string"


def test_a_strict_model_filling_every_optional_with_null_gets_the_defaults():
    """What a strict model sends: every property, the optional ones null."""
    for name, spec in TOOLS.items():
        schema = next(t for t in TOOL_LIST if t["name"] == name)["inputSchema"]
        arguments = {p: None for p in schema["properties"]}
        arguments.update({p: "x" for p in schema["required"]})
        assert check_arguments(spec.args, arguments) == spec.args(
            **{p: "x" for p in schema["required"]}
        )


def test_openai_agents_converts_every_tool_to_a_strict_schema():
    for tool in TOOL_LIST:
        strict = ensure_strict_json_schema(copy.deepcopy(tool["inputSchema"]))
        assert strict_problems(strict) == [], tool["name"]


def test_pydantic_ai_sends_no_default_and_converts_every_tool_to_strict():
    for tool in TOOL_LIST:
        # not strict (its default for MCP tools): it keeps a `default`, which Azure refuses
        plain = OpenAIJsonSchemaTransformer(copy.deepcopy(tool["inputSchema"])).walk()
        assert [p for p, node in walk(plain) if "default" in node] == [], tool["name"]
        strict = OpenAIJsonSchemaTransformer(copy.deepcopy(tool["inputSchema"]), strict=True)
        assert strict_problems(strict.walk()) == [], tool["name"]
        gemini = GoogleJsonSchemaTransformer(copy.deepcopy(tool["inputSchema"])).walk()
        assert gemini_problems(gemini) == [], tool["name"]


def test_langchain_converts_every_tool_with_strict_true():
    done = run_script("langchain_strict.py", input=json.dumps(TOOL_LIST))
    assert done.returncode == 0, done.stderr
    converted = json.loads(done.stdout)
    assert [f["name"] for f in converted] == list(TOOLS)
    for function in converted:
        assert function["strict"] is True
        assert strict_problems(function["parameters"]) == [], function["name"]
        assert gemini_problems(function["parameters"]) == [], function["name"]


def test_every_tool_has_a_title_and_truthful_annotations():
    hints = {
        t["name"]: (
            t["title"],
            t["annotations"]["readOnlyHint"],
            t["annotations"]["destructiveHint"],
            t["annotations"]["idempotentHint"],
            t["annotations"]["openWorldHint"],
        )
        for t in TOOL_LIST
    }
    assert hints == {
        "send_message": ("Send a message to a subagent", False, False, False, True),
        "interrupt_agent": ("Interrupt a subagent", False, True, True, False),
        "list_agents": ("List subagents", True, False, True, False),
        "report": ("Report to the parent agent", False, False, False, False),
        "spawn_agent": ("Start a subagent", False, False, False, True),
        "wait_agents": ("Wait for subagents' reports and notices", False, False, False, False),
        "ask_parent": ("Ask the parent agent", False, False, False, False),
        "ask_user": ("Ask the person", False, False, False, True),
    }
    for tool in TOOL_LIST:
        assert tool["annotations"]["title"] == tool["title"]
    wait = next(t for t in TOOL_LIST if t["name"] == "wait_agents")
    assert "it consumes what it returns" in wait["description"]
