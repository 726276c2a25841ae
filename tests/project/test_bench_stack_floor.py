"""The stack floor (benchmarks/peers/stack_floor.py): subagentd's own transport and jsonrpcserver's
public dispatch of a method that does nothing, driven over real pipes as run.py drives it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers"))
import stack_floor  # noqa: E402
from harness import Server, server_command  # noqa: E402

from subagentd.wire import transport  # noqa: E402


def test_it_reads_and_writes_with_the_servers_transport_and_dispatches_through_jsonrpcserver():
    assert stack_floor.FdReader is transport.FdReader
    assert stack_floor.FdWriter is transport.FdWriter
    assert stack_floor.dispatch_to_response.__module__ == "jsonrpcserver.main"
    assert stack_floor.to_serializable_one.__module__ == "jsonrpcserver.response"


def test_it_answers_initialize_ping_and_tools_call_over_pipes():
    server = Server(server_command("stack"))
    try:
        assert server.initialize()["serverInfo"] == {"name": "stack-floor", "version": "0"}
        assert server.call("ping", {}) == {}
        call = {"name": "list_agents", "arguments": {"scope": "children"}}
        assert server.call("tools/call", call) == {
            "content": [{"type": "text", "text": "ok"}],
            "isError": False,
        }
        frames = [server.frame("ping", {}, server.take_id()) for _ in range(300)]
        elapsed, errors, examples = server.pipelined(frames)
        assert (errors, examples) == (0, [])
        assert server.close() == 0
    finally:
        server.kill()


def test_a_notification_gets_no_reply():
    assert stack_floor.answer(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') is None
    assert stack_floor.answer(b"  ") is None
    reply = stack_floor.answer(b'{"jsonrpc":"2.0","id":7,"method":"ping"}')
    assert reply == b'{"jsonrpc":"2.0","result":{},"id":7}'
