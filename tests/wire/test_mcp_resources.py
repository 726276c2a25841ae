"""MCP resources of a `--caller` connection (PROTOCOL.md section 5): the caller's subtree only,
each agent's state and last outcome and its transcript, paged, subscriptions with
notifications/resources/updated — and a read consumes nothing. Real process, real pipes."""

from __future__ import annotations

import json
import time

from tests.frameworks.scenario import wait_for_line, watcher
from tests.wire.test_mcp_caller_traffic import Piped, initialized, request


def rpc(piped: Piped, method: str, params: dict) -> dict:
    request_id = next(piped.ids)
    piped.send(request(request_id, method, params))
    while True:
        line = piped.proc.stdout.readline()  # type: ignore[union-attr]
        assert line
        piped.seen.append(json.loads(line))
        if piped.seen[-1].get("id") == request_id:
            return piped.seen[-1]


def read(piped: Piped, uri: str) -> dict:
    (content,) = rpc(piped, "resources/read", {"uri": uri})["result"]["contents"]
    assert (content["uri"], content["mimeType"]) == (uri, "application/json")
    return json.loads(content["text"])


def test_resources_show_the_subtree_its_state_and_transcript_and_consume_nothing(tmp_path):
    log = tmp_path / "log"
    piped = initialized(str(tmp_path / "resources.db"))
    init = piped.seen[0]["result"]["capabilities"]
    assert init["resources"] == {"subscribe": True, "listChanged": False}
    piped.call("spawn_agent", label="watcher", prompt=watcher(log), child_id="c1")
    wait_for_line(log, "waiting")

    listed = rpc(piped, "resources/list", {})["result"]["resources"]
    assert [(r["uri"], r["name"]) for r in listed] == [
        ("subagentd://agent/root", "root"),
        ("subagentd://agent/root/transcript", "root transcript"),
        ("subagentd://agent/c1", "c1"),
        ("subagentd://agent/c1/transcript", "c1 transcript"),
    ]
    templates = rpc(piped, "resources/templates/list", {})["result"]["resourceTemplates"]
    assert [t["uriTemplate"] for t in templates] == [
        "subagentd://agent/{agent_id}",
        "subagentd://agent/{agent_id}/transcript{?after}",
    ]
    running = read(piped, "subagentd://agent/c1")
    assert (running["status"], running["kind"], running.get("last_turn")) == (
        "running",
        "continuable",
        None,
    )

    assert rpc(piped, "resources/subscribe", {"uri": "subagentd://agent/c1"})["result"] == {}
    before = len(piped.seen)
    piped.call("interrupt_agent", agent_id="c1")
    piped.call("list_agents")  # c1's turn ends when its process exits: read until it settled
    deadline = time.monotonic() + 60
    while read(piped, "subagentd://agent/c1")["status"] != "ready":
        assert time.monotonic() < deadline
    updates = [
        m for m in piped.seen[before:] if m.get("method") == "notifications/resources/updated"
    ]
    assert updates and {u["params"]["uri"] for u in updates} == {"subagentd://agent/c1"}

    ended = read(piped, "subagentd://agent/c1")
    assert ended["last_turn"] == {"reason": "aborted", "output": "waiting\nterminated"}
    assert (ended["queued"], ended["parked"], ended["label"]) == (0, 0, "watcher")
    page = read(piped, "subagentd://agent/c1/transcript")
    assert page["agent_id"] == "c1" and page.get("next") is None
    types = [e["type"] for e in page["events"]]
    assert types == [
        "descriptor",
        "activated",
        "message",
        "turn_start",
        "interrupt",
        "runner_exit",
        "turn_end",
        "settled",
    ], types

    # reading consumed nothing: wait_agents still returns the notice
    result = piped.call("wait_agents", timeout_ms=0)
    assert result["content"][0]["text"].startswith(
        "Background subagent c1 was stopped before it finished.\n"
    )

    outside = rpc(piped, "resources/read", {"uri": "subagentd://agent/elsewhere"})
    assert outside["error"]["code"] == -32602
    assert outside["error"]["message"] == "resource not found: subagentd://agent/elsewhere"
    assert piped.end() == []


def test_the_python_clients_read_resources_with_typed_methods():
    import anyio

    from subagentd.client import AsyncClient, Client

    with Client.spawn(db=":memory:", caller="root") as client:
        client.initialize()
        listed = client.resources_list()
        assert [r.uri for r in listed.resources] == [
            "subagentd://agent/root",
            "subagentd://agent/root/transcript",
        ]
        names = [t.name for t in client.resources_templates_list().resourceTemplates]
        assert names == ["agent", "transcript"]
        (content,) = client.resources_read("subagentd://agent/root").contents
        assert json.loads(content.text)["kind"] == "ordinary"
        assert client.resources_subscribe("subagentd://agent/root") == client.resources_unsubscribe(
            "subagentd://agent/root"
        )

    async def main() -> str:
        async with AsyncClient.spawn(db=":memory:", caller="root") as aclient:
            await aclient.initialize()
            (page,) = (await aclient.resources_read("subagentd://agent/root/transcript")).contents
            return json.loads(page.text)["agent_id"]

    assert anyio.run(main) == "root"


def test_a_transcript_uri_with_a_bad_after_is_invalid_params_and_the_server_keeps_serving():
    from subagentd.client import Client, RpcError

    with Client.spawn(db=":memory:", caller="root") as client:
        client.initialize()
        base = "subagentd://agent/root/transcript?after="
        for after in ("²", "1" * 30, "9223372036854775808", "-1", "1e3"):
            try:
                client.resources_read(base + after)
            except RpcError as error:
                assert error.code == -32602, (after, error)
                assert error.message == (
                    f'invalid after "{after}" in a transcript URI: a sequence number from 0 to'
                    " 9223372036854775807"
                )
                assert error.data == {"reason": "INVALID_PARAMS"}
            else:
                raise AssertionError(f"after={after} was answered")
        (content,) = client.resources_read(base + "9223372036854775807").contents
        assert json.loads(content.text) == {"agent_id": "root", "events": []}
        client.ping()  # still serving


class CountingStore:
    """read_events over one agent's events at the given sequence numbers (others' events are the
    gaps), counting the rows it returns."""

    def __init__(self, seqs: list[int], reports: dict[int, str]) -> None:
        self.seqs, self.reports, self.rows = seqs, reports, 0

    def read_events(self, session_id: str, after: int, limit: int, max_bytes: int):
        from bisect import bisect_right

        from subagentd.schema.records import EventRecord

        start = bisect_right(self.seqs, after)
        chosen = self.seqs[start : start + limit]
        self.rows += len(chosen)
        events = [
            EventRecord(
                seq=seq,
                turn_id=None,
                type="report" if seq in self.reports else "message",
                data=json.dumps({"output": self.reports[seq]} if seq in self.reports else {}),
                at="",
            )
            for seq in chosen
        ]
        return events, len(events) == limit


def test_the_last_report_is_looked_for_in_a_bounded_tail_however_long_the_transcript():
    """300,000 events: the rows read stay near REPORT_TAIL (a few windows, a binary search),
    whether the report is the newest event, inside the tail, older, or absent."""
    from subagentd.mcp.resources import REPORT_TAIL, last_report

    for stride in (1, 7):  # the agent's events alone, or between other agents' events
        seqs = [1 + stride * n for n in range(300_000)]
        cases = {
            "newest": ({seqs[-1]: "newest"}, "newest"),
            "in the tail": ({seqs[-REPORT_TAIL]: "in the tail"}, "in the tail"),
            "older": ({seqs[-REPORT_TAIL - 1]: "older"}, None),
            "none": ({}, None),
        }
        for name, (reports, expected) in cases.items():
            store = CountingStore(seqs, reports)
            assert last_report(store, "a") == expected, (stride, name)
            assert store.rows <= 12 * REPORT_TAIL, (stride, name, store.rows)
    assert last_report(CountingStore([], {}), "a") is None


def test_the_agent_resource_names_the_last_report_of_its_newest_thousand_events(tmp_path):
    """Through the real server: a report older than the newest 1,000 events is not looked for
    (PROTOCOL.md §5); a newer one is the resource's last_report."""
    import sqlite3

    from subagentd.client import Client

    db = str(tmp_path / "long.db")
    with Client.spawn(db=db) as host:
        host.initialize()
        host.agents_open("root")
        host.agents_close("root")

    def append(*events: tuple[str, dict]) -> None:
        with sqlite3.connect(db) as conn:
            conn.executemany(
                "INSERT INTO events (root_id, session_id, turn_id, type, data, at)"
                " VALUES (?,?,?,?,?,?)",
                [
                    ("root", "root", None, kind, json.dumps(data), "2026-01-01T00:00:00Z")
                    for kind, data in events
                ],
            )

    append(("report", {"output": "early"}), *[("message", {"n": n}) for n in range(1_000)])
    with Client.spawn(db=db, caller="root") as client:
        client.initialize()
        (content,) = client.resources_read("subagentd://agent/root").contents
        assert "last_report" not in json.loads(content.text)
    append(("report", {"output": "late"}), *[("message", {"n": n}) for n in range(900)])
    with Client.spawn(db=db, caller="root") as client:
        client.initialize()
        (content,) = client.resources_read("subagentd://agent/root").contents
        assert json.loads(content.text)["last_report"] == "late"
