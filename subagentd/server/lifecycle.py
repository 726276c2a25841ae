"""The handshake methods (initialize, ping, server/discover) and notifications/initialized.

They need no state and nothing of core, so start-up answers them before the rest is loaded
(`handshake_methods`); server/handlers.py build_methods puts them first in the full table.
"""

from __future__ import annotations

import sys
from typing import Any

import subagentd
from subagentd.errors import InvalidRequestError
from subagentd.schema import host_methods as h
from subagentd.schema import lifecycle as lc
from subagentd.schema.base import Params
from subagentd.schema.tasks import SERVER_CAPABILITY, TASKS_EXTENSION, TASKS_VERSIONS
from subagentd.wire.call import Call, Handler
from subagentd.wire.methods import RawParams, declared, method

INSTRUCTIONS = (
    "subagentd keeps a tree of agents: spawn children, queue their next turns with send_message,"
    " stop a descendant's turn with interrupt_agent, see the tree with list_agents, collect their"
    " reports and finish notices with wait_agents; a continuable child reports to its parent"
    " with report."
)


def server_info() -> lc.Implementation:
    return lc.Implementation(name="subagentd", version=subagentd.__version__)


def capabilities(call: Call) -> dict[str, Any]:
    served: dict[str, Any] = {"tools": {"listChanged": False}}
    if call.session.offers_resources:  # announced only where resources/* are served
        served["resources"] = {"subscribe": True, "listChanged": False}
    served |= {
        "experimental": {
            "subagentd": {
                "protocol": subagentd.PROTOCOL,
                "reportDelivery": call.settings.report_delivery,
            }
        },
    }
    if call.session.tasks:  # MCP tasks: only for a negotiated version that has them
        served["tasks"] = SERVER_CAPABILITY
    return served


@method("initialize", lc.InitializeParams, lc.InitializeResult, writes=False, confined=True)
def initialize(call: Call, p: lc.InitializeParams) -> lc.InitializeResult:
    if call.session.initialized:
        raise InvalidRequestError("initialize was already called on this connection")
    requested = p.protocolVersion
    version = requested if requested in lc.HANDSHAKE_VERSIONS else lc.HANDSHAKE_VERSIONS[0]
    wanted = ((p.capabilities or {}).get("experimental") or {}).get("subagentd") or {}
    if isinstance(wanted, dict):
        if wanted.get("statusEvents") is True:
            call.settings.status_events = True
        if wanted.get("hostNotifications") is True:
            call.session.host_notifications = True
        if wanted.get("reportDelivery") in ("wakeup", "quiet"):
            call.settings.report_delivery = wanted["reportDelivery"]
        call.session.asks_user = wanted.get("askUser") is True  # question/ask (ask_user)
    elicit = (p.capabilities or {}).get("elicitation")  # `{}` or with `form`: a form is shown
    call.session.elicitation = isinstance(elicit, dict) and (not elicit or "form" in elicit)
    call.session.initialized = True
    call.session.tasks = call.session.offers_tasks and version in TASKS_VERSIONS  # MCP tasks
    return lc.InitializeResult(
        protocolVersion=version,
        serverInfo=server_info(),
        capabilities=capabilities(call),
        instructions=INSTRUCTIONS,
    )


@method("notifications/initialized", None, None, writes=False, confined=True)
def initialized(call: Call, p: RawParams) -> None:
    return None


@method("server/discover", Params, lc.DiscoverResult, writes=False, confined=True)
def discover(call: Call, p: Params) -> lc.DiscoverResult:
    served = capabilities(call)
    served.pop("tasks", None)  # 2025-11-25's tasks are the handshake's; the stateless era's:
    if call.session.offers_tasks:  # the 2026-07-28 MCP tasks extension (mcp/tasks.py)
        served["extensions"] = {TASKS_EXTENSION: {}}
    return lc.DiscoverResult(
        supportedVersions=list(lc.SUPPORTED_VERSIONS),
        capabilities=served,
        serverInfo=server_info(),
        instructions=INSTRUCTIONS,
    )


@method("ping", Params, h.Empty, writes=False, confined=True)
def ping(call: Call, p: Params) -> h.Empty:
    return h.Empty()


def handshake_methods() -> dict[str, Handler]:
    """The methods declared here: initialize, notifications/initialized, server/discover, ping."""
    return declared(sys.modules[__name__])
