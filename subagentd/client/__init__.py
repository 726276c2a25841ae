"""subagentd's Python client: spawn subagentd (or attach to its pipes) and speak its protocol.

`Client` is blocking, `AsyncClient` runs on anyio; both have one typed method per host-API
method and tool. `AgentHost` / `AsyncAgentHost` run agent turns when subagentd asks for them.
This package imports only `subagentd.schema` (the wire types), never the server's internals.
"""

from subagentd.client.async_turns import AsyncAgentHost, AsyncTurnControl
from subagentd.client.asynchronous import AsyncClient
from subagentd.client.blocking import Client
from subagentd.client.errors import CannotStart, ConnectionClosed, RequestTimeout, RpcError
from subagentd.client.process import server_command
from subagentd.client.turns import AgentHost, TurnControl, TurnOutcome, report_turn_error

__all__ = [
    "AgentHost",
    "AsyncAgentHost",
    "AsyncClient",
    "AsyncTurnControl",
    "CannotStart",
    "Client",
    "ConnectionClosed",
    "RequestTimeout",
    "RpcError",
    "TurnControl",
    "TurnOutcome",
    "report_turn_error",
    "server_command",
]
