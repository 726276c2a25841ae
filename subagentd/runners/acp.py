"""One ACP agent process, seen from subagentd as its client (docs/acp.md).

The Agent Client Protocol is JSON-RPC 2.0 over the agent's stdin and stdout, one message a line.
This module starts the process (its own process group), sends `initialize` once, and then carries
requests (`session/new`, `session/load`, `session/prompt`), notifications (`session/cancel`) and
what the agent sends: `session/update` notifications go to the sink of their session, and the
agent's requests are answered — `session/request_permission` by the permission policy,
`elicitation/create` (a form) by the subagent's parent (runners/acp_runner.py), anything else
(file system, terminals: not offered in the client capabilities) with -32601. When the
process exits, every request still waiting fails with AgentGone.

Nothing here waits on the agent while holding anything: what is sent is queued (up to
`max_line` bytes; an agent that does not read that much ends its process) and written by a
task of its own; a line it sends is bounded by `max_line` (a longer one ends its process); what
it does wrong again and again (lines that are not JSON, updates of a session with no turn
running) is logged the 1st, 10th, 100th, … time.

Longer than ~300 lines on purpose: one agent process's pipes — its queued writes, its reader
and the bound on its lines, the requests waiting for its replies, its end — share its state.
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc
import msgspec

import subagentd
from subagentd.runners.process import signal_group

log = logging.getLogger("subagentd")

PROTOCOL_VERSION = 1
STDERR_TAIL = 4096  # bytes of an agent process's stderr kept for the transcript
MAX_LINE = 16 * 1024 * 1024  # an agent's message longer than this ends the process (default)
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class Sink(Protocol):
    """Where a session's `update` objects go, in arrival order (runners/acp_progress.py)."""

    def update(self, update: dict[str, Any]) -> None: ...

    async def room(self) -> None:
        """Until it can take more (the reader waits: the agent's output is held in its pipe)."""


# (the process, the request's params) -> the outcome object; the reader goes on meanwhile
Permission = Callable[["AgentProcess", dict[str, Any]], Awaitable[dict[str, Any]]]


class AgentGone(Exception):
    """The agent process exited (or could not be started) before it answered."""


class AcpError(Exception):
    """The agent answered a request with a JSON-RPC error."""

    def __init__(self, method: str, error: Any) -> None:
        message = error.get("message") if isinstance(error, dict) else None
        super().__init__(f"{method}: {message or error}")
        self.method = method
        self.error = error


class Noise:
    """Something an agent does wrong again and again: logged the 1st, 10th, 100th, … time, so
    its log lines grow with the logarithm of their count; the count in all when it exits."""

    __slots__ = ("what", "count", "_next")

    def __init__(self, what: str) -> None:
        self.what = what  # "wrote {count} line(s) that are not JSON"
        self.count = 0
        self._next = 1

    def seen(self) -> None:
        self.count += 1
        if self.count == self._next:
            self._next *= 10
            log.warning("an ACP agent %s; ignored", self.what.format(count=self.count))

    def close(self) -> None:
        if self.count and self.count * 10 != self._next:  # the last count was not logged
            log.warning("an ACP agent %s in all; ignored", self.what.format(count=self.count))
            self._next = self.count * 10


class AgentProcess:
    """A running ACP agent: its sessions, its requests in flight, its capabilities."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        permission: Permission,
        max_line: int = MAX_LINE,
        elicitation: Permission | None = None,
    ) -> None:
        self.command = command
        self.env = env
        self.permission = permission
        self.elicitation = elicitation  # the answer to `elicitation/create` (a form)
        self.max_line = max_line  # bytes of a line either way (--max-frame-bytes)
        self.process: anyio.abc.Process | None = None
        self.capabilities: dict[str, Any] = {}
        self.sinks: dict[str, Sink] = {}  # session id -> where its updates go
        self.prompting = 0  # prompts in flight (the pool picks the least busy)
        self.alive = False
        self.stderr = bytearray()
        self.not_json = Noise("wrote {count} line(s) that are not JSON")
        self.stray = Noise("sent {count} session/update(s) of a session with no turn running")
        self._next_id = 0
        self._waiting: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._out = bytearray()  # what is still to be written to its stdin
        self._out_ready = anyio.Event()
        self._gone = "the ACP agent process is not running"
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def loads(self) -> bool:
        """The agent advertised `loadSession`."""
        return self.capabilities.get("loadSession") is True

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the process and `initialize` it; AgentGone when either fails."""
        await self.spawn(tg)
        await self.initialize()

    async def spawn(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the process, its readers and its writer; AgentGone when it cannot start."""
        try:
            self.process = await anyio.open_process(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                start_new_session=True,
            )
        except OSError as exc:
            raise AgentGone(f"subagentd could not start the ACP agent: {exc}") from None
        self.alive = True
        self._tg = tg
        tg.start_soon(self._read)
        tg.start_soon(self._read_stderr)
        tg.start_soon(self._write_out)

    async def initialize(self) -> None:
        """`initialize`, once; its capabilities kept."""
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                    **({"elicitation": {"form": {}}} if self.elicitation is not None else {}),
                },
                "clientInfo": {"name": "subagentd", "version": subagentd.__version__},
            },
        )
        capabilities = result.get("agentCapabilities") if isinstance(result, dict) else None
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request; its result (AcpError for an error reply, AgentGone if it exits)."""
        if not self.alive:
            raise AgentGone(self._gone)
        self._next_id += 1
        request_id = self._next_id
        done = anyio.Event()
        box: list[Any] = []
        self._waiting[request_id] = (done, box)
        try:
            self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await done.wait()
        finally:
            self._waiting.pop(request_id, None)
        if not box:
            raise AgentGone(self._gone)
        reply = box[0]
        if "error" in reply:
            raise AcpError(method, reply["error"])
        return reply.get("result")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification (queued: it never waits)."""
        if self.alive:
            self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _send(self, message: dict[str, Any]) -> None:
        """Queue a message for the writer; an agent that leaves more than `max_line` bytes
        unread is stopped."""
        if not self.alive:
            return
        data = _encode(message) + b"\n"
        if self._out and len(self._out) + len(data) > self.max_line:
            self.kill(f"the ACP agent process left over {self.max_line} bytes unread; stopped")
            return
        self._out += data
        self._out_ready.set()

    async def _write_out(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        while self.alive:
            await self._out_ready.wait()
            self._out_ready = anyio.Event()
            while self._out and self.alive:
                data = bytes(self._out)
                self._out.clear()
                try:
                    await self.process.stdin.send(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    self._ended("the ACP agent process closed its stdin")

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        buffer = bytearray()
        scanned = 0  # bytes of the buffer known to hold no newline
        try:
            async for chunk in self.process.stdout:
                buffer += chunk
                start = 0
                while (end := buffer.find(b"\n", scanned)) >= 0:
                    line = bytes(buffer[start:end])
                    start = scanned = end + 1
                    if line.strip():
                        await self._received(line)
                del buffer[:start]
                scanned = len(buffer)
                if len(buffer) > self.max_line:
                    self.kill(f"the ACP agent sent a line over {self.max_line} bytes; stopped")
                    break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        code = await self.process.wait()
        self._ended(f"the ACP agent process exited (status {code})")

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        try:
            async for chunk in self.process.stderr:
                self.stderr += chunk
                if len(self.stderr) > STDERR_TAIL:
                    del self.stderr[: len(self.stderr) - STDERR_TAIL]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass

    def _ended(self, why: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self._gone = why
        self._out.clear()
        self._out_ready.set()  # the writer ends
        for done, _ in list(self._waiting.values()):
            done.set()  # an empty box: AgentGone
        self.not_json.close()
        self.stray.close()

    async def _received(self, line: bytes) -> None:
        try:
            message = _decode(line)
        except msgspec.DecodeError:
            self.not_json.seen()
            return
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method is None:  # a reply to one of ours
            waiting = self._waiting.get(message.get("id"))  # type: ignore[arg-type]
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            return
        raw = message.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if "id" not in message:
            if method == "session/update":
                sink = self.sinks.get(str(params.get("sessionId")))
                update = params.get("update")
                if sink is None:
                    self.stray.seen()  # its turn ended: nothing holds it
                elif isinstance(update, dict):
                    sink.update(update)
                    await sink.room()
            return
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "session/request_permission":
            assert self._tg is not None
            self._tg.start_soon(self._answer_permission, reply, params)  # it may wait long
            return
        if method == "elicitation/create" and self.elicitation is not None:
            assert self._tg is not None
            self._tg.start_soon(self._answer_elicitation, reply, params, self.elicitation)
            return
        reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        self._send(reply)

    async def _answer_permission(self, reply: dict[str, Any], params: dict[str, Any]) -> None:
        reply["result"] = {"outcome": await self.permission(self, params)}
        self._send(reply)

    async def _answer_elicitation(
        self, reply: dict[str, Any], params: dict[str, Any], answer: Permission
    ) -> None:
        reply["result"] = await answer(self, params)
        self._send(reply)

    def kill(self, why: str | None = None) -> None:
        """SIGKILL to its process group; with `why`, what waits for it fails at once saying so."""
        self._signal(signal.SIGKILL)
        if why is not None:
            log.error("%s", why)
            self._ended(why)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, signum: signal.Signals) -> None:
        signal_group(self.process, signum)

    async def close(self) -> None:
        """Reap the process (after it was signalled or exited)."""
        if self.process is not None:
            with anyio.CancelScope(shield=True):
                await self.process.aclose()


def permission_policy(policy: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`--acp-permission` allow or deny: allow picks the agent's allow-once option (else
    allow-always), deny its reject-once option (else reject-always); with neither the request
    is cancelled. (ask-parent: runners/acp_runner.py, core/questions.py.)"""
    wanted = (
        ("allow_once", "allow_always") if policy == "allow" else ("reject_once", "reject_always")
    )

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        given = params.get("options")
        options: list[Any] = given if isinstance(given, list) else []
        for kind in wanted:
            for option in options:
                if isinstance(option, dict) and option.get("kind") == kind:
                    return {"outcome": "selected", "optionId": option.get("optionId")}
        return {"outcome": "cancelled"}

    return answer
