"""`subagentd a2a` driven by a2a-sdk's own client (and by plain HTTP where the client would not
send what is tested): send, follow-up, stream, subscribe, cancel, list, a retried messageId, the
quotas, the bearer token, bad requests, and a kill -9 of the face (docs/a2a.md)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidRequestError, TaskNotCancelableError, TaskNotFoundError

ROOT = Path(__file__).resolve().parents[2]
RUNNER = shlex.join([sys.executable, str(ROOT / "tests" / "scripts" / "runner.py")])
WAIT = 30.0


class Face:
    """A `subagentd a2a` process: its URL, and its detached serving process stopped at the end."""

    def __init__(self, tmp: Path, root: str = "root1", *extra: str, db: str | None = None) -> None:
        self.tmp, self.root = tmp, root
        self.db = db or str(tmp / "face.db")
        self.env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp / "run")}
        (tmp / "run").mkdir(mode=0o700, exist_ok=True)
        self.log = tmp / f"face-{root}-{time.monotonic_ns()}.log"
        argv = [sys.executable, "-m", "subagentd", "a2a", "--listen", "127.0.0.1:0"]
        argv += ["--db", self.db, "--caller", root, "--runner", RUNNER, "--idle-timeout", "2"]
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [*argv, *extra], stdout=subprocess.PIPE, stderr=log, text=True, env=self.env
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("subagentd a2a: serving http://127.0.0.1:"), (
            line + self.log.read_text()
        )
        self.url = line.split()[3]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        else:  # it ended by itself: what it said is shown with a failure
            print(f"face {self.root} exited {self.process.returncode}:\n{self.log.read_text()}")
        self.process.wait(WAIT)
        assert self.process.stdout is not None
        self.process.stdout.close()

    def stop_background(self) -> None:
        """SIGTERM the detached serving processes this face's runtime directory names."""
        for pid_file in (self.tmp / "run" / "subagentd").glob("*.pid"):
            try:
                pid = json.loads(pid_file.read_text())["pid"]
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError, KeyError):
                continue
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
                time.sleep(0.05)


@pytest.fixture
def face(tmp_path: Path) -> Iterator[Face]:
    made = Face(tmp_path)
    yield made
    made.stop()
    made.stop_background()


def message(text: str, task_id: str = "", message_id: str | None = None) -> Message:
    return Message(
        message_id=message_id or str(uuid.uuid4()),
        task_id=task_id,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )


def steps(*items: dict[str, Any]) -> str:
    return json.dumps({"steps": list(items)})


async def send(url: str, sent: Message, *, streaming: bool = False, now: bool = False) -> list:
    """What a2a-sdk's client yields for one message (each a StreamResponse)."""
    client = await create_client(url, ClientConfig(streaming=streaming))
    try:
        config = SendMessageConfiguration(return_immediately=now)
        return [
            e
            async for e in client.send_message(
                SendMessageRequest(message=sent, configuration=config)
            )
        ]
    finally:
        await client.close()


async def call(url: str, method: str, request: Any) -> Any:
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        return await getattr(client, method)(request)
    finally:
        await client.close()


def run(function: Any, *args: Any, **kwargs: Any) -> Any:
    return anyio.run(lambda: function(*args, **kwargs))


def texts(task: Any) -> list[tuple[int, str]]:
    return [(m.role, m.parts[0].text) for m in task.history]


def test_send_then_a_follow_up_in_the_same_task_then_get_and_list(face):
    [first] = run(send, face.url, message("hello"))
    task = first.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "done: hello"
    assert task.context_id == task.id
    [again] = run(send, face.url, message("again", task.id))
    assert again.task.id == task.id
    assert again.task.status.message.parts[0].text == "done: again"
    got = run(call, face.url, "get_task", GetTaskRequest(id=task.id))
    user, agent = Role.ROLE_USER, Role.ROLE_AGENT
    assert texts(got) == [
        (user, "hello"),
        (agent, "done: hello"),
        (user, "again"),
        (agent, "done: again"),
    ]
    assert [a.parts[0].text for a in got.artifacts] == ["done: hello", "done: again"]
    short = run(call, face.url, "get_task", GetTaskRequest(id=task.id, history_length=1))
    assert texts(short) == [(agent, "done: again")]
    listed = run(call, face.url, "list_tasks", ListTasksRequest())
    assert [t.id for t in listed.tasks] == [task.id]
    assert listed.tasks[0].status.state == TaskState.TASK_STATE_COMPLETED


def test_a_message_in_a_tasks_context_without_its_task_id_is_that_tasks_follow_up(face):
    [first] = run(send, face.url, message("hello"))
    sent = message("again")
    sent.context_id = first.task.context_id
    [again] = run(send, face.url, sent)
    assert again.task.id == first.task.id
    assert again.task.status.message.parts[0].text == "done: again"
    listed = run(call, face.url, "list_tasks", ListTasksRequest())
    assert [t.id for t in listed.tasks] == [first.task.id]


def test_a_retried_message_id_is_applied_once(face):
    sent = message("hello", message_id="m-1")
    [one] = run(send, face.url, sent)
    [two] = run(send, face.url, sent)
    assert one.task.id == two.task.id
    follow = message("more", one.task.id, message_id="m-2")
    run(send, face.url, follow)
    run(send, face.url, follow)
    got = run(call, face.url, "get_task", GetTaskRequest(id=one.task.id))
    assert [text for _, text in texts(got)] == ["hello", "done: hello", "more", "done: more"]
    listed = run(call, face.url, "list_tasks", ListTasksRequest())
    assert len(listed.tasks) == 1


def test_the_stream_shows_the_task_its_reports_and_its_end(face):
    said = steps({"tool": "report", "args": {"output": "halfway"}}, {"print": "finished"})
    events = run(send, face.url, message(said), streaming=True)
    assert events[0].HasField("task")
    updates = [e.status_update.status for e in events[1:]]
    assert all(e.HasField("status_update") for e in events[1:])
    assert [u.message.parts[0].text for u in updates if u.message.parts][:1] == ["halfway"]
    assert updates[-1].state == TaskState.TASK_STATE_COMPLETED
    assert updates[-1].message.parts[0].text.startswith("report -> ")  # the runner's output
    assert updates[-1].message.parts[0].text.endswith("finished")


def test_cancel_interrupts_the_running_turn_and_subscribe_follows_it(face, tmp_path):
    slow = steps({"print": "waiting"}, {"wait_term": True})
    [first] = run(send, face.url, message(slow), now=True)
    task_id = first.task.id
    assert first.task.status.state in (TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_SUBMITTED)

    async def subscribe_then_cancel() -> list:
        seen: list = []

        async def follow() -> None:
            client = await create_client(face.url, ClientConfig(streaming=True))
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                seen.append(event)
            await client.close()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follow)
            with anyio.fail_after(WAIT):
                while not seen:
                    await anyio.sleep(0.05)
            cancelled = await call(face.url, "cancel_task", CancelTaskRequest(id=task_id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        return seen

    seen = run(subscribe_then_cancel)
    assert seen[0].task.id == task_id
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError, match=f"task {task_id} is not working"):
        run(call, face.url, "cancel_task", CancelTaskRequest(id=task_id))


def test_tasks_of_another_root_are_not_found(face, tmp_path):
    [mine] = run(send, face.url, message("hello"))
    other = Face(tmp_path, "root2", db=face.db)
    try:
        assert run(call, other.url, "list_tasks", ListTasksRequest()).tasks == []
        with pytest.raises(TaskNotFoundError):
            run(call, other.url, "get_task", GetTaskRequest(id=mine.task.id))
        with pytest.raises(TaskNotFoundError):
            run(send, other.url, message("hijack", mine.task.id))
    finally:
        other.stop()


def test_a_kill_9_of_the_face_loses_nothing_it_acknowledged(face, tmp_path):
    go = tmp_path / "go"
    slow = steps({"print": "slow "}, {"wait_file": str(go)}, {"print": "went"})
    [first] = run(send, face.url, message(slow), now=True)
    task_id = first.task.id
    run(send, face.url, message("follow", task_id, message_id="f-1"), now=True)
    face.stop(signal.SIGKILL)
    go.touch()
    again = Face(tmp_path, db=face.db)
    try:
        [retried] = run(send, again.url, message("follow", task_id, message_id="f-1"))
        assert retried.task.status.state == TaskState.TASK_STATE_COMPLETED
        got = run(call, again.url, "get_task", GetTaskRequest(id=task_id))
        assert [text for _, text in texts(got)] == [slow, "slow went", "follow", "done: follow"]
    finally:
        again.stop()


def test_quotas_on_streams_and_tasks_per_client(tmp_path):
    bounded = Face(tmp_path, "root1", "--max-streams", "1", "--max-tasks-per-client", "1")
    try:
        slow = steps({"wait_term": True})
        [first] = run(send, bounded.url, message(slow), now=True)
        with pytest.raises(InvalidRequestError, match=r"this client has 1 tasks working"):
            run(send, bounded.url, message("another"), now=True)

        async def two_streams() -> None:
            async with anyio.create_task_group() as tasks:
                opened = anyio.Event()

                async def hold() -> None:
                    client = await create_client(bounded.url, ClientConfig(streaming=True))
                    async for _ in client.subscribe(SubscribeToTaskRequest(id=first.task.id)):
                        opened.set()
                    await client.close()

                tasks.start_soon(hold)
                with anyio.fail_after(WAIT):
                    await opened.wait()
                client = await create_client(bounded.url, ClientConfig(streaming=True))
                with pytest.raises(InvalidRequestError, match=r"1 streams are open"):
                    async for _ in client.subscribe(SubscribeToTaskRequest(id=first.task.id)):
                        pass
                await client.close()
                await call(bounded.url, "cancel_task", CancelTaskRequest(id=first.task.id))

        run(two_streams)
    finally:
        bounded.stop()
        bounded.stop_background()


def post(url: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(
        url,
        content=body,
        headers={"content-type": "application/json", "A2A-Version": "1.0", **headers},
        timeout=WAIT,
    )


def test_bad_requests_get_json_rpc_errors_and_the_face_keeps_serving(face):
    assert post(face.url, b"{not json").json()["error"]["code"] == -32700
    unknown = {"jsonrpc": "2.0", "id": 1, "method": "Frobnicate", "params": {}}
    assert post(face.url, json.dumps(unknown).encode()).json()["error"]["code"] == -32601
    wrong = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": 5, "x": [1]}}
    assert post(face.url, json.dumps(wrong).encode()).json()["error"]["code"] == -32602
    empty = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "SendMessage",
        "params": {"message": {"messageId": "e", "role": "ROLE_USER", "parts": []}},
    }
    answer = post(face.url, json.dumps(empty).encode()).json()
    assert answer["error"]["code"] == -32602
    big = post(face.url, b'{"jsonrpc": "2.0", "id": 4, "pad": "' + b"x" * (1 << 20) + b'"}')
    assert big.status_code == 413
    assert big.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "the request body is over --max-body-bytes (1048576 bytes)",
        },
    }
    [done] = run(send, face.url, message("still here"))
    assert done.task.status.message.parts[0].text == "done: still here"


def test_a_token_file_is_required_off_loopback_and_then_every_request_carries_it(tmp_path):
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    base = [sys.executable, "-m", "subagentd", "a2a", "--db", str(tmp_path / "x.db")]
    base += ["--caller", "r", "--runner", RUNNER]
    refused = subprocess.run(
        [*base, "--listen", "192.0.2.1:8080"], capture_output=True, text=True, env=env, timeout=60
    )
    assert refused.returncode == 1
    assert refused.stderr == (
        "cannot start: --listen 192.0.2.1 is not a loopback address: give --token-file FILE"
        " (a bearer token, mode 0600; generated there when the file does not exist)\n"
    )
    shared = tmp_path / "shared-token"
    shared.write_text("secret\n")
    shared.chmod(0o644)
    readable = subprocess.run(
        [*base, "--token-file", str(shared)], capture_output=True, text=True, env=env, timeout=60
    )
    assert readable.returncode == 1
    assert readable.stderr == (
        f"cannot start: --token-file {shared} can be read by others (mode 0644): chmod 600 it\n"
    )
    token_file = tmp_path / "token"
    guarded = Face(tmp_path, "root1", "--token-file", str(token_file))
    try:
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 40
        card = httpx.get(guarded.url + ".well-known/agent-card.json", timeout=WAIT).json()
        assert card["securitySchemes"] == {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "the token of the face's --token-file",
                }
            }
        }
        assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
        assert post(guarded.url, body.encode()).status_code == 401
        wrong = post(guarded.url, body.encode(), Authorization="Bearer nope")
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == 'Bearer realm="subagentd"'
        right = post(guarded.url, body.encode(), Authorization=f"Bearer {token}")
        assert right.status_code == 200 and right.json()["result"]["tasks"] == []
    finally:
        guarded.stop()
        guarded.stop_background()


def test_the_card_describes_subagentd(face):
    card = httpx.get(face.url + ".well-known/agent-card.json", timeout=WAIT).json()
    assert card["name"] == "subagentd"
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
    assert card["supportedInterfaces"] == [
        {"url": face.url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert [s["id"] for s in card["skills"]] == ["delegate"]
    assert "securitySchemes" not in card  # loopback, no token file: none asked


def test_a_face_without_a_runner_does_not_start(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "subagentd", "a2a", "--db", str(tmp_path / "x.db"), "--caller", "r"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "cannot start: subagentd a2a needs --runner: the face runs no model of its own,"
        " and its subagents' turns run with --runner (docs/a2a.md)\n"
    )


def test_a_subagent_waiting_for_an_answer_in_its_turn_is_working():
    """`waiting` (its turn waits for its parent's or the person's answer) is a turn that runs:
    `working`, whatever its last turn's ending (docs/a2a.md, States)."""
    from subagentd.a2a.states import state_of

    assert state_of("waiting", 0, None) == TaskState.TASK_STATE_WORKING
    assert state_of("waiting", 0, "completed") == TaskState.TASK_STATE_WORKING
    assert state_of("running", 0, "completed") == TaskState.TASK_STATE_WORKING
