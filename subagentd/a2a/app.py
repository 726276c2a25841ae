"""The face's HTTP side: the agent card, the JSON-RPC route (a2a-sdk's), and the guard in front of
them (a bearer token when one is configured, a bounded body); `serve` runs it all with the
serving subagentd child process beside it until SIGINT/SIGTERM or that process ends."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import secrets
import socket
import stat
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from subagentd.a2a.handler import Face, Quotas
from subagentd.a2a.tree import Tree

log = logging.getLogger("subagentd.a2a")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
CARD_PATH = "/.well-known/agent-card.json"
SCHEME = "bearer"


class CannotStart(Exception):
    """A setting the face cannot serve with: one line, said before anything listens."""


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_listen(value: str) -> Listen:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host or int(port) > 65535:
        raise CannotStart(f"--listen {value}: give HOST:PORT, e.g. 127.0.0.1:8080")
    return Listen(host.strip("[]"), int(port))


def read_token(path: str | None, listen: Listen) -> str | None:
    """The bearer token: read from `path` (which must be private to its owner), or generated and
    written there (0600) when the file does not exist; None without a path on loopback."""
    if path is None:
        if listen.loopback:
            return None
        raise CannotStart(
            f"--listen {listen.host} is not a loopback address: give --token-file FILE"
            " (a bearer token, mode 0600; generated there when the file does not exist)"
        )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        from subagentd.private_files import write_private

        token = secrets.token_urlsafe(32)
        write_private(path, token + "\n")
        return token
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CannotStart(
            f"--token-file {path} can be read by others (mode {stat.S_IMODE(mode):04o}):"
            " chmod 600 it"
        )
    with open(path) as file:
        token = file.read().strip()
    if not token:
        raise CannotStart(f"--token-file {path} is empty")
    return token


def card(url: str, token: bool) -> Any:
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        HTTPAuthSecurityScheme,
        SecurityRequirement,
        SecurityScheme,
        StringList,
    )

    import subagentd

    made = AgentCard(
        name="subagentd",
        description="Delegates each task to a subagent of one subagentd tree: a task is a"
        " subagent, a follow-up message its next turn, a cancel its interrupt.",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        version=subagentd.__version__,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="delegate",
                name="Delegate to a subagent",
                description="Starts a subagent with the message as its prompt; follow-ups in the"
                " same task are its next turns, in order.",
                tags=["delegation", "subagents"],
            )
        ],
    )
    if token:
        made.security_schemes[SCHEME].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description="the token of the face's --token-file"
                )
            )
        )
        made.security_requirements.append(SecurityRequirement(schemes={SCHEME: StringList()}))
    return made


def guard(app: App, token: str | None, max_body: int) -> App:
    """401 without the bearer token (the card excepted); a body over `max_body` bytes is a
    JSON-RPC error (HTTP 413), read no further."""
    expected = f"Bearer {token}".encode() if token else None

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if expected is not None and scope.get("path") != CARD_PATH:
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not secrets.compare_digest(given, expected):
                await _answer(send, 401, {"error": "a bearer token is required"}, bearer=True)
                return
        if scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > max_body:
                await _answer(send, 413, _too_large(max_body))
                return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return guarded


def _too_large(limit: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": f"the request body is over --max-body-bytes ({limit} bytes)",
        },
    }


async def _answer(send: Send, status: int, body: dict[str, Any], bearer: bool = False) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    if bearer:
        headers.append((b"www-authenticate", b'Bearer realm="subagentd"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


@dataclass(frozen=True)
class Settings:
    listen: Listen
    db: str
    root: str
    serve_args: Sequence[str]
    token: str | None
    quotas: Quotas


async def serve(settings: Settings) -> int:
    """Listen, start the serving subagentd, serve until a signal or that process ends."""
    import uvicorn
    from a2a.server.routes import (
        DefaultServerCallContextBuilder,
        create_agent_card_routes,
        create_jsonrpc_routes,
    )
    from starlette.applications import Starlette

    class Context(DefaultServerCallContextBuilder):
        def build(self, request: Any) -> Any:
            made = super().build(request)
            made.state["client"] = request.client.host if request.client else ""
            return made

    family = socket.AF_INET6 if ":" in settings.listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.listen.host, settings.listen.port))
        sock.listen(2048)  # connections wait in the backlog from the printed line on
    except OSError as exc:
        raise CannotStart(f"--listen {settings.listen.host}:{settings.listen.port}: {exc}") from exc
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{port}/"
    client, root = Tree.spawn(settings.db, settings.root, settings.serve_args)
    async with client:
        tree = Tree(client, root)
        await tree.start()
        face = Face(tree, settings.quotas)
        routes = [
            *create_agent_card_routes(card(url, settings.token is not None)),
            *create_jsonrpc_routes(face, "/", context_builder=Context()),
        ]
        app = guard(Starlette(routes=routes), settings.token, settings.quotas.max_body_bytes)
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_drain, tree, server)
            print(f"subagentd a2a: serving {url} for root {root}", flush=True)
            await server.serve(sockets=[sock])
            tasks.cancel_scope.cancel()
    return 0


async def _drain(tree: Tree, server: Any) -> None:
    try:
        await tree.drain()
    except Exception as exc:  # the serving subagentd ended: the face has nothing to serve
        print(f"subagentd a2a: the serving subagentd ended ({exc}); stopping", file=sys.stderr)
        server.should_exit = True
