"""`subagentd schema`: the OpenRPC document is generated from the Structs, committed, and true."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # declared in the `test` extra: these checks never skip
import pytest

import subagentd
from subagentd.schema.codes import Code
from subagentd.schema.notifications import NOTIFICATIONS
from subagentd.server.handlers import METHODS
from subagentd.server.openrpc import JSON_SCHEMA_DIALECT, document, render

COMMITTED = Path(__file__).resolve().parents[2] / "clients" / "openrpc.json"
REGENERATE = "regenerate it with: python -m subagentd schema > clients/openrpc.json"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(render())


def methods_by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in doc["methods"]}


def resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"external $ref {ref!r}"
    node: Any = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"$ref {ref!r} does not resolve"
        node = node[part]
    return node


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def test_committed_copy_is_the_generated_document():
    assert COMMITTED.exists(), f"clients/openrpc.json is missing; {REGENERATE}"
    assert COMMITTED.read_bytes() == render(), f"clients/openrpc.json is stale; {REGENERATE}"


def test_rendering_is_deterministic_and_matches_document():
    assert render() == render()
    assert json.loads(render()) == json.loads(json.dumps(document()))


def test_schema_command_prints_the_committed_document():
    proc = subprocess.run(
        [sys.executable, "-m", "subagentd", "schema"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert json.loads(proc.stdout) == json.loads(COMMITTED.read_bytes())
    assert proc.stdout == render()


def test_document_names_openrpc_and_protocol_versions(doc):
    assert doc["openrpc"] == "1.3.2"
    assert doc["info"]["title"] == "subagentd"
    assert doc["info"]["version"] == subagentd.__version__
    assert doc["info"]["x-protocol-version"] == subagentd.PROTOCOL == 1
    assert doc["x-json-schema-dialect"] == JSON_SCHEMA_DIALECT


def test_every_served_method_is_described(doc):
    described = methods_by_name(doc)
    # the MCP tasks extension's own methods (stateless era only) are PROTOCOL.md's, not the
    # host API document's
    extension = {name for name, handler in METHODS.items() if handler.extension_only}
    assert extension == {"tasks/update", "subscriptions/listen"}
    assert not extension & set(described)
    assert set(METHODS) - extension <= set(described)
    for name, handler in METHODS.items():
        if name in extension:
            continue
        method = described[name]
        assert method["paramStructure"] == "by-name"
        if handler.result is None:
            assert method["x-notification"] is True and "result" not in method
        else:
            assert "x-notification" not in method
            assert method["result"]["schema"]["$ref"].startswith("#/components/schemas/")


def test_every_notification_is_described_with_its_direction(doc):
    described = methods_by_name(doc)
    for name in NOTIFICATIONS:
        assert described[name]["x-notification"] is True
        assert described[name]["x-direction"] == "server-to-host"
        assert "result" not in described[name]
    for name in ("notifications/initialized", "notifications/cancelled", "$/cancelRequest"):
        assert described[name]["x-notification"] is True
        assert described[name]["x-direction"] == "host-to-server"
    assert [p["name"] for p in described["notifications/cancelled"]["params"]][0] == "requestId"
    assert [p["name"] for p in described["$/cancelRequest"]["params"]][0] == "id"


def test_method_names_are_unique(doc):
    names = [m["name"] for m in doc["methods"]]
    assert len(names) == len(set(names))


def test_params_list_required_fields_first_with_wire_names(doc):
    for method in doc["methods"]:
        flags = [p["required"] for p in method["params"]]
        assert flags == sorted(flags, reverse=True), method["name"]
    spawn = {p["name"]: p["required"] for p in methods_by_name(doc)["agents/spawn"]["params"]}
    assert spawn["caller"] and spawn["label"] and spawn["prompt"]
    assert not spawn["_meta"] and not spawn["mode"]


def test_every_code_is_a_component_error(doc):
    errors = doc["components"]["errors"]
    for code in Code:
        assert errors[code.name]["code"] == int(code)
        assert errors[code.name]["message"] == code.name
        assert errors[code.name]["data"], f"{code.name} has no description"
    assert errors["UNAUTHORIZED"]["data"].startswith("Stale caller")


def test_domain_errors_are_referenced_by_every_request(doc):
    for method in doc["methods"]:
        if method.get("x-notification"):
            assert "errors" not in method
            continue
        named = {ref["$ref"].rsplit("/", 1)[-1] for ref in method["errors"]}
        assert {"UNAUTHORIZED", "UNKNOWN_AGENT", "INVALID_PARAMS", "OVERLOADED"} <= named


def test_every_ref_resolves_within_the_document(doc):
    found = refs(doc)
    assert found
    for ref in found:
        resolve(doc, ref)


def test_send_message_result_requires_text_and_message_id(doc):
    result = resolve(doc, methods_by_name(doc)["send_message"]["result"]["schema"]["$ref"])
    assert {"text", "message_id"} <= set(result["required"])
    error_data = resolve(doc, methods_by_name(doc)["send_message"]["x-error-data"]["$ref"])
    assert set(error_data["required"]) == {"reason", "text"}


def test_component_schemas_are_valid_json_schema_2020_12(doc):
    for name, schema in doc["components"]["schemas"].items():
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"components.schemas.{name} is not valid JSON Schema 2020-12: {exc}")


def validator(doc: dict[str, Any], ref: str) -> Any:
    """A 2020-12 validator for one component, with the document's components reachable."""
    root = {"$schema": JSON_SCHEMA_DIALECT, "$ref": ref, "components": doc["components"]}
    return jsonschema.Draft202012Validator(root)


def assert_result_valid(doc: dict[str, Any], method: str, result: Any) -> None:
    ref = methods_by_name(doc)[method]["result"]["schema"]["$ref"]
    errors = [e.message for e in validator(doc, ref).iter_errors(result)]
    assert not errors, f"{method} result {result!r} does not match its schema: {errors}"


def assert_notification_valid(doc: dict[str, Any], method: str, params: Any) -> None:
    ref = methods_by_name(doc)[method]["x-params"]["$ref"]
    errors = [e.message for e in validator(doc, ref).iter_errors(params)]
    assert not errors, f"{method} params {params!r} do not match their schema: {errors}"


def test_real_responses_match_their_result_schemas(doc, make_server):
    host = make_server(initialize=False).host
    assert_result_valid(doc, "initialize", host.initialize())
    assert_result_valid(doc, "ping", host.call("ping"))
    assert_result_valid(doc, "agents/open", host.open("root"))
    spawned = host.call(
        "agents/spawn", {"caller": "root", "child_id": "c1", "label": "t", "prompt": "go"}
    )
    assert_result_valid(doc, "agents/spawn", spawned)
    start = host.notification("turn/start", agent_id="c1")
    assert_notification_valid(doc, "turn/start", start)
    assert_result_valid(doc, "agents/get", host.call("agents/get", {"agent_id": "c1"}))
    assert_result_valid(doc, "agents/list", host.call("agents/list", {"root_id": "root"}))
    assert_result_valid(doc, "list_agents", host.tool("list_agents", "root"))
    sent = host.tool("send_message", "root", subagent_id="c1", message="more")
    assert_result_valid(doc, "send_message", sent)
    message = host.call("messages/get", {"message_id": sent["message_id"]})
    assert_result_valid(doc, "messages/get", message)
    assert_result_valid(
        doc, "tools/list", host.call("tools/list", {"_meta": {"subagentd/caller": "c1"}})
    )
    host.end_turn("c1", start["turn_id"], "completed", output="done")
    assert_result_valid(doc, "transcript/read", host.call("transcript/read", {"agent_id": "c1"}))


def test_stateless_era_results_still_match(doc, make_server):
    host = make_server(initialize=False).host
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    assert_result_valid(doc, "server/discover", host.call("server/discover", {"_meta": meta}))
    pong = host.call("ping", {"_meta": meta})
    assert pong == {"resultType": "complete"}
    assert_result_valid(doc, "ping", pong)
