"""Scripted A2A agents built on a2a-sdk's server classes (AgentExecutor, the default request
handler and its JSON-RPC routes), served by uvicorn on a loopback port in a thread of the test:
the remote children of tests/processes/test_a2a_child.py. No model: each reply is scripted from
the text it is sent."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

Scope = MutableMapping[str, Any]
App = Callable[..., Awaitable[None]]


def _text(context: RequestContext) -> str:
    message = context.message
    return "\n".join(p.text for p in message.parts if p.text) if message is not None else ""


class Scripted(AgentExecutor):
    """What each kind of remote agent does with a message (see `KINDS`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.seen: list[str] = []  # every message's text, in order
        self.message_ids: list[str] = []
        self.contexts: list[str] = []  # each message's contextId as the agent saw it
        self.cancelled = threading.Event()
        self.started = threading.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = _text(context)
        self.seen.append(text)
        assert context.message is not None
        self.message_ids.append(context.message.message_id)
        self.contexts.append(context.context_id or "")
        task_id, context_id = context.task_id or "", context.context_id or ""
        if self.kind == "replies":  # a direct answer: a Message, no task
            reply = Message(
                message_id=f"reply-{len(self.seen)}",
                context_id=context_id,
                role=Role.ROLE_AGENT,
                parts=[Part(text=f"at once: {text}")],
            )
            await event_queue.enqueue_event(reply)
            return
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        say = lambda words: updater.new_agent_message([Part(text=words)])  # noqa: E731
        await updater.start_work(say("working on it"))
        if self.kind == "answers":
            last = text.strip().splitlines()[-1] if text.strip() else ""
            await updater.add_artifact([Part(text=f"answer: {last}")], name="answer")
            await updater.complete(
                updater.new_agent_message(
                    [Part(text="done")],
                    metadata={"usage": {"input_tokens": 7, "output_tokens": 3}},
                )
            )
        elif self.kind == "asks":
            if context.current_task is None:
                await updater.requires_input(say("which colour?"))
            else:
                await updater.complete(say(f"painted it {text}"))
        elif self.kind == "fails":
            await updater.failed(say("the disk is full"))
        elif self.kind == "rejects":
            await updater.reject(say("not my kind of work"))
        elif self.kind == "needs-auth":
            await updater.requires_auth(say("sign in first"))
        elif self.kind == "slow":
            self.started.set()
            await asyncio.sleep(3600)
        elif self.kind.startswith("drops"):
            self.started.set()
            await asyncio.sleep(0.3)  # the stream is cut meanwhile (Cut below)
            await updater.complete(say(f"survived: {text.strip().splitlines()[-1]}"))
        else:
            await updater.failed(say(f"unknown kind {self.kind}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.set()
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


class Cut:
    """Drops connections: `before`, the first streaming request's, before the agent sees it;
    `after`, the first streaming response's, after its first event; `gone`, every response
    after the first streaming response's first event (the agent is lost for good)."""

    def __init__(self, app: App, mode: str) -> None:
        self.app, self.mode = app, mode
        self.streams = 0

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (self.streams and self.mode != "gone"):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:  # read the request to see which method it calls
            part = await receive()
            body += part.get("body", b"")
            more = part.get("more_body", False)
        replayed = False

        async def again() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        streaming = b"SendStreamingMessage" in body
        if not streaming and not (self.mode == "gone" and self.streams):
            await self.app(scope, again, send)
            return
        self.streams += 1
        if self.mode == "before" or not streaming:  # headers, then the connection drops
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            raise ConnectionResetError("the test drops the connection")
        events = 0

        async def cutting(message: Any) -> None:
            nonlocal events
            if message["type"] == "http.response.body" and message.get("body"):
                events += 1
                if events > 1:
                    raise ConnectionResetError("the test cuts the stream")
            await send(message)

        await self.app(scope, again, cutting)


class RemoteAgent:
    """One scripted agent served on 127.0.0.1 (its card at /.well-known/agent-card.json)."""

    def __init__(self, kind: str, *, streaming: bool = True) -> None:
        self.executor = Scripted(kind)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        card = AgentCard(
            name=f"scripted-{kind}",
            description="a scripted test agent",
            supported_interfaces=[
                AgentInterface(url=self.url, protocol_binding="JSONRPC", protocol_version="1.0")
            ],
            version="1.0",
            capabilities=AgentCapabilities(streaming=streaming, push_notifications=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[AgentSkill(id="s", name="s", description="scripted", tags=["test"])],
        )
        handler = DefaultRequestHandlerV2(self.executor, InMemoryTaskStore(), card)
        app: App = Starlette(
            routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        )
        if kind.startswith("drops"):  # drops, drops-before, drops-gone
            app = Cut(app, kind.partition("-")[2] or "after")
        self.app = app
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> RemoteAgent:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the scripted agent did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
