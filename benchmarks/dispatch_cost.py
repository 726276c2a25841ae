"""Per-message cost of the dispatcher in-process: Python calls (cProfile) and CPU time.

    PYTHONPATH=<checkout> python benchmarks/dispatch_cost.py [--direct] [--reps 5] [--n 2000]
        [--pipelined K]

Drives a `Dispatcher` with plain decoded messages (no pipes, no event loop) on an in-memory
database, so machine load does not change the call counts and only inflates the CPU times: the
best of `--reps` loops is reported. `--direct` runs methods without jsonrpcserver
(`invoke_directly`), the floor the jsonrpcserver path is compared with (docs/architecture.md).
`--pipelined K` feeds encoded frames K at a time to `handle_frames`, as the connection does with
frames read together. Every run also times the floor: jsonrpcserver's public dispatch alone
(`dispatch_to_response` with `to_serializable_one`, the way wire/rpc.py calls it, one request at a time) on an entry
that does nothing but return Success(None), and prints the ping's cost as a multiple of it.
"""

from __future__ import annotations

import sys

sys.path.pop(0)  # this directory's profile.py would shadow the stdlib module cProfile imports

import argparse  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import msgspec  # noqa: E402

from subagentd.core.service import Outlets, Service, Unattached  # noqa: E402
from subagentd.core.settings import Settings
from subagentd.schema.host_methods import OpenParams, SpawnParams
from subagentd.server.dispatcher import Dispatcher, invoke_directly
from subagentd.server.handlers import METHODS
from subagentd.storage.database import SqliteStore
from subagentd.wire.session import Session

MESSAGES: dict[str, Callable[[int], dict[str, Any]]] = {
    "ping": lambda i: {"jsonrpc": "2.0", "id": i, "method": "ping"},
    "tools/call list_agents": lambda i: {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": "list_agents",
            "arguments": {"scope": "children"},
            "_meta": {"subagentd/caller": "root"},
        },
    },
    "send_message": lambda i: {
        "jsonrpc": "2.0",
        "id": i,
        "method": "send_message",
        "params": {"caller": "root", "subagent_id": "c0", "message": f"follow-up {i}"},
    },
    "tools/call send_message": lambda i: {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": "send_message",
            "arguments": {"subagent_id": "c0", "message": f"follow-up {i}"},
            "_meta": {"subagentd/caller": "root"},
        },
    },
}


def make(direct: bool, pipelined: int = 0) -> tuple[Service, Dispatcher]:
    service = Service(SqliteStore(":memory:"), Settings(max_queued=0))
    service.recovery.recover()
    service.host.open(OpenParams(agent_id="root"))
    service.host.spawn(SpawnParams(caller="root", child_id="c0", label="x", prompt="go"))
    service.commit()
    if direct:
        invoke: Any = invoke_directly
    else:
        from subagentd.wire.rpc import JsonRpc

        invoke = JsonRpc(METHODS)
    dispatcher = Dispatcher(
        Session(initialized=True), service.settings, invoke, service=service, methods=METHODS
    )
    service.attach(Outlets(dispatcher.emit, Unattached()))  # nothing here is timed
    return service, dispatcher


def settle(service: Service, dispatcher: Dispatcher) -> None:
    """Commit and drop what the loop held (notifications; pipelined: the encoded replies)."""
    dispatcher.notes.clear()
    service.commit()
    dispatcher.ledger.committed()


def floor(reps: int, n: int) -> float:
    """jsonrpcserver's own cost per request (seconds): its public dispatch on an empty entry."""
    from jsonrpcserver import Success, dispatch_to_response
    from jsonrpcserver.response import to_serializable_one

    from subagentd.wire.rpc import _SIGNATURE

    def empty(*args: Any, **params: Any) -> Any:
        return Success(None)

    empty.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # as wire/rpc.py's entries
    entries = {"ping": empty}
    one: Any = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    context = object()
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        for _ in range(n):
            dispatch_to_response(
                one,
                entries,
                context=context,
                deserializer=dict,
                validator=id,
                post_process=to_serializable_one,
            )
        best = min(best, time.process_time() - start)
    print(f"{'jsonrpcserver floor':24} {'':20} {best / n * 1e6:7.1f} µs/request (empty entry)")
    return best / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direct", action="store_true")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--pipelined", type=int, default=0)
    args = parser.parse_args()
    per_floor = floor(args.reps, args.n)
    service, dispatcher = make(args.direct, args.pipelined)
    if args.pipelined:  # encoded frames, K per handle_frames call; each reply computed
        encode = msgspec.json.Encoder().encode
        k = args.pipelined

        def pipelined(messages: list[Any]) -> list[Any]:
            frames = [encode(m) for m in messages]
            return [
                partial(dispatcher.handle_frames, frames[i : i + k])
                for i in range(0, len(frames), k)
            ]

    for name, build in MESSAGES.items():
        messages = [build(i) for i in range(args.n)]
        if args.pipelined:
            messages = pipelined(messages)  # type: ignore[assignment]
        run = (lambda m: m()) if args.pipelined else dispatcher.dispatch
        if not args.pipelined:
            for m in messages[:50]:  # warm up (caches, first-use imports); each one accepted
                reply: Any = dispatcher.dispatch(m)
                assert "error" not in reply and not getattr(reply["result"], "isError", 0), reply
        else:
            for m in messages[:2]:
                run(m)
        settle(service, dispatcher)
        profiler = cProfile.Profile()
        probe = messages[50:150] if not args.pipelined else messages[: max(1, 100 // k)]
        per = 1 if not args.pipelined else k
        profiler.enable()
        for m in probe:
            run(m)
        profiler.disable()
        calls = pstats.Stats(profiler).total_calls / (len(probe) * per)  # type: ignore[attr-defined]
        settle(service, dispatcher)
        best = float("inf")
        for _ in range(args.reps):
            start = time.process_time()
            for m in messages:
                run(m)
            best = min(best, time.process_time() - start)
            settle(service, dispatcher)
        ratio = f"  ({best / args.n / per_floor:.2f}x the floor)" if name == "ping" else ""
        print(f"{name:24} {calls:6.0f} calls/message {best / args.n * 1e6:7.1f} µs/message{ratio}")


if __name__ == "__main__":
    main()
