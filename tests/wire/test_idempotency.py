"""Idempotency keys: the original result on retry (also after a restart), 1008 on other arguments,
and the documented retention."""

import pytest

from subagentd.errors import IdempotencyConflictError
from subagentd.schema.host_methods import SpawnParams, SpawnResult
from subagentd.schema.records import IdempotencyRecord
from subagentd.schema.tools import SendMessageArgs, SendMessageResult
from subagentd.storage.database import SqliteStore
from tests.core_host import CoreHost


def send_once(core, key, message="hello"):
    args = SendMessageArgs(subagent_id="c1", message=message)
    return core.svc.idempotent(
        "root",
        key,
        "send_message",
        {"subagent_id": "c1", "message": message},
        SendMessageResult,
        lambda: core.svc.tools.send_message("root", None, args),
    )


def test_same_key_after_a_restart_returns_the_original_result(tmp_path):
    path = str(tmp_path / "keys.db")
    first = CoreHost(store=SqliteStore(path))
    first.open("root")
    first.spawn("root", "c1")
    original = send_once(first, "k")
    first.store.commit()
    first.store.conn.close()
    second = CoreHost(store=SqliteStore(path), owner_alive=lambda owner: False)
    second.open("root")
    assert send_once(second, "k") == original
    assert second.svc.records.get("c1").queued == 1  # not queued twice
    with pytest.raises(IdempotencyConflictError):
        send_once(second, "k", message="something else")


def test_spawn_retry_with_the_same_key_does_not_spawn_twice():
    core = CoreHost()
    core.open("root")
    params = SpawnParams(caller="root", label="x", prompt="p", idempotency_key="s")

    def spawn():
        return core.svc.idempotent(
            "root",
            "s",
            "agents/spawn",
            {"label": "x"},
            SpawnResult,
            lambda: core.svc.host.spawn(params),
        )

    first = spawn()
    assert spawn() == first
    assert [row.id for row in core.list("root").agents] == [first.child_id]


def test_keys_older_than_the_retention_are_forgotten():
    core = CoreHost(idempotency_retention=7.0)
    record = IdempotencyRecord(method="send_message", fingerprint="f", result="{}")
    core.store.put_idempotent("root", "old", record, "2020-01-01T00:00:00.000000Z")
    core.store.put_idempotent("root", "fresh", record, "2999-01-01T00:00:00.000000Z")
    core.svc.recovery.recover()  # runs at start-up and with every heartbeat
    assert core.store.get_idempotent("root", "old") is None
    assert core.store.get_idempotent("root", "fresh") is not None


def test_the_same_arguments_in_another_key_order_are_the_same_request():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    args = SendMessageArgs(subagent_id="c1", message="hello")

    def send(arguments):
        return core.svc.idempotent(
            "root",
            "k",
            "send_message",
            arguments,
            SendMessageResult,
            lambda: core.svc.tools.send_message("root", None, args),
        )

    original = send({"subagent_id": "c1", "message": "hello"})
    assert send({"message": "hello", "subagent_id": "c1"}) == original  # JSON objects are unordered
    assert core.svc.records.get("c1").queued == 1


def test_a_key_reused_with_other_arguments_or_another_method_is_a_conflict():
    core = CoreHost()
    core.open("root")
    core.spawn("root", "c1")
    send_once(core, "k")
    expected = 'idempotency key "k" was already used by "root" with different arguments'
    with pytest.raises(IdempotencyConflictError) as caught:
        send_once(core, "k", message="something else")
    assert caught.value.message == expected
    with pytest.raises(IdempotencyConflictError) as caught:
        core.svc.idempotent(
            "root",
            "k",
            "report",
            {"subagent_id": "c1", "message": "hello"},
            SendMessageResult,
            lambda: pytest.fail("a conflicting key must not run anything"),
        )
    assert caught.value.message == expected
    assert core.svc.records.get("c1").queued == 1
