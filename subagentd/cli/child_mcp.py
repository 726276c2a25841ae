"""`subagentd mcp`: the tools of a runner turn's agent as an MCP stdio server (PROTOCOL.md §11).

An agent CLI started inside a `--runner` turn (its command, or an ACP agent's session) starts
this as an MCP server (`claude --mcp-config "$SUBAGENTD_MCP_CONFIG"`, an ACP `mcpServers`
entry). The handshake (`initialize`, `ping`, `server/discover`, both MCP eras) is answered here
by the server's own Dispatcher and lifecycle methods; `tools/list` and `tools/call` are relayed
to the serving process over SUBAGENTD_SOCKET with SUBAGENTD_TOKEN, exactly as `subagentd tool`
relays (runners/tool_socket.py): that process lists what this agent may use (`--tools`, its tool
filter, `report` for a continuable child) and runs each call as this agent, by the tools' own
rules. Outside a runner turn it refuses to start: one line on stderr, exit status 2.

Each `tools/call` runs on a thread of its own, so a `wait_agents` does not hold up the rest; a
client's `notifications/cancelled` hangs up that call's socket, which cancels its wait there.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any

import msgspec

from subagentd.cli.tool import read_reply
from subagentd.core.texts import REFUSED
from subagentd.errors import AdmissionDrainingError, SubagentdError, error_for
from subagentd.schema import tools as t
from subagentd.schema.codes import Code
from subagentd.server.dispatcher import CANCEL, Dispatcher, decode, invoke_directly
from subagentd.server.lifecycle import handshake_methods
from subagentd.wire.call import Call, Handler
from subagentd.wire.framing import FrameReader, encode_frame
from subagentd.wire.session import Session, valid_id

NOT_IN_RUNNER = (
    "subagentd mcp: {name} is not set; this server serves the tools of the agent whose turn"
    " `subagentd serve --runner` started (it sets SUBAGENTD_SOCKET, SUBAGENTD_TOKEN and"
    " SUBAGENTD_AGENT_ID)"
)
UNREACHABLE = (
    "the serving subagentd cannot be reached at {path} ({reason}); this run can no longer act"
    " as agent {caller}"
)
CHUNK = 256 * 1024
_encode = msgspec.json.Encoder().encode


class Identity(msgspec.Struct, frozen=True):
    """Who this server acts as: the runner turn's agent and its activation's token."""

    caller: str
    token: str
    socket_path: str


def identity(environ: Mapping[str, str]) -> Identity | str:
    """The agent from the runner's environment, or the one line saying why there is none."""
    for name in ("SUBAGENTD_SOCKET", "SUBAGENTD_TOKEN", "SUBAGENTD_AGENT_ID"):
        if not environ.get(name):
            return NOT_IN_RUNNER.format(name=name)
    return Identity(
        environ["SUBAGENTD_AGENT_ID"], environ["SUBAGENTD_TOKEN"], environ["SUBAGENTD_SOCKET"]
    )


class Relayed(Exception):
    """The relay socket could not be used (the serving process is gone)."""


class ChildServer:
    """The MCP server of one agent: lifecycle here, the tools relayed (see the module docstring)."""

    def __init__(self, who: Identity, out_fd: int) -> None:
        from subagentd.core.settings import Settings

        self.who = who
        self.out_fd = out_fd
        self.write_lock = threading.Lock()
        self.calls: dict[Any, socket.socket] = {}  # request id -> its relay socket, while it runs
        self.running: set[Any] = set()  # ids of the tools/call requests not yet answered
        self.cancelled: set[Any] = set()  # of those, the ones the client cancelled
        self.calls_lock = threading.Lock()
        methods = handshake_methods()  # the handshake's, and notifications/initialized
        methods["tools/list"] = Handler(
            self._list, t.ToolsListParams, t.ToolsListResult, writes=False, confined=True
        )
        methods["tools/call"] = Handler(
            self._call, t.ToolsCallParams, t.CallToolResult, writes=False, confined=True
        )
        # only tools/* are relayed: tasks/* and resources/* are neither served nor announced
        session = Session(default_caller=who.caller, offers_tasks=False, offers_resources=False)
        self.dispatcher = Dispatcher(session, Settings(), invoke_directly, methods=methods)
        self.framer = FrameReader()

    # --- the relayed methods ---------------------------------------------------------------

    def _meta(self, meta: dict[str, Any] | None) -> dict[str, Any]:
        return {
            **(meta or {}),
            "subagentd/caller": self.who.caller,
            "subagentd/token": self.who.token,
        }

    def _list(self, call: Call, p: t.ToolsListParams) -> Any:
        try:
            return self._relay(None, "tools/list", {"_meta": self._meta(p.meta)})
        except Relayed as exc:
            raise AdmissionDrainingError(str(exc)) from None

    def _call(self, call: Call, p: t.ToolsCallParams) -> Any:
        params = {"name": p.name, "arguments": p.arguments or {}, "_meta": self._meta(p.meta)}
        try:
            return self._relay(call.request_id, "tools/call", params)
        except Relayed as exc:
            return t.CallToolResult(
                content=[{"type": "text", "text": f"{REFUSED}{exc}"}], isError=True
            )

    def _relay(self, request_id: Any, method: str, params: dict[str, Any]) -> Any:
        """One request over the relay socket; its result, or its error raised as it came."""
        request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(self.who.socket_path)
                if request_id is not None:
                    with self.calls_lock:
                        if request_id in self.cancelled:  # cancelled before it was sent
                            raise Relayed("cancelled")
                        self.calls[request_id] = conn
                try:
                    conn.sendall(json.dumps(request).encode() + b"\n")
                    reply = read_reply(conn)
                finally:
                    if request_id is not None:
                        with self.calls_lock:
                            self.calls.pop(request_id, None)
        except OSError as exc:
            raise Relayed(self._unreachable(exc.strerror or str(exc))) from None
        except ValueError:  # cut off mid-line (the call was cancelled)
            raise Relayed(self._unreachable("its answer was cut off")) from None
        if reply is None:
            raise Relayed(self._unreachable("it closed the connection without answering"))
        if "error" in reply:
            error = reply["error"]
            raise _error(error.get("code"), str(error.get("message")), error.get("data"))
        return reply["result"]

    def _unreachable(self, reason: str) -> str:
        return UNREACHABLE.format(path=self.who.socket_path, reason=reason, caller=self.who.caller)

    # --- stdio -----------------------------------------------------------------------------

    def serve(self, in_fd: int) -> None:
        """Answer frames until end of input; calls still running are waited for."""
        workers: list[threading.Thread] = []
        while True:
            data = os.read(in_fd, CHUNK)
            frames = self.framer.feed(data) if data else self.framer.finish()
            for frame in frames:
                self._frame(frame, workers)
            if not data:
                break
        for worker in workers:
            worker.join()

    def _frame(self, frame: Any, workers: list[threading.Thread]) -> None:
        try:
            message = decode(frame)
        except SubagentdError:
            self._write(self.dispatcher.handle_frame(frame))
            return
        if isinstance(message, dict) and message.get("method") in CANCEL:
            params = message.get("params")
            key = CANCEL[message["method"]]
            cancelled = params.get(key) if isinstance(params, dict) else None
            with self.calls_lock:
                if cancelled in self.running:  # its answer is not sent
                    self.cancelled.add(cancelled)
                conn = self.calls.get(cancelled)
            if conn is not None:  # the relay sees the hang-up and cancels the call's wait
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return
        if isinstance(message, dict) and message.get("method") == "tools/call":
            if valid_id(message.get("id")):
                with self.calls_lock:
                    self.running.add(message["id"])
            worker = threading.Thread(target=self._answer, args=(message,), daemon=True)
            workers[:] = [w for w in workers if w.is_alive()]
            workers.append(worker)
            worker.start()
            return
        self._write(self.dispatcher.dispatch(message))

    def _answer(self, message: Any) -> None:
        reply = self.dispatcher.dispatch(message)
        with self.calls_lock:
            request_id = message.get("id")
            self.running.discard(request_id)
            if request_id in self.cancelled:  # a cancelled request is not answered
                self.cancelled.discard(request_id)
                return
        self._write(reply)

    def _write(self, reply: Any) -> None:
        if reply is None:
            return
        payload = encode_frame(_encode(reply), self.framer.lsp)
        with self.write_lock:
            view = memoryview(payload)
            while view:
                view = view[os.write(self.out_fd, view) :]


def _error(code: Any, message: str, data: Any) -> SubagentdError:
    try:
        error = error_for(Code(code), message)
    except (ValueError, KeyError):
        error = SubagentdError(message)
    if isinstance(data, dict):
        error.data = {k: v for k, v in data.items() if k != "reason"}
    return error


def main(environ: Mapping[str, str] | None = None) -> int:
    """`subagentd mcp`: serve stdin/stdout; 2 outside a runner turn."""
    who = identity(os.environ if environ is None else environ)
    if isinstance(who, str):
        sys.stderr.write(who + "\n")
        return 2
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)  # nothing but frames on the protocol's stdout
    sys.stdout = sys.stderr
    ChildServer(who, out_fd).serve(0)
    return 0
