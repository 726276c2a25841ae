"""`--caller R`: the root an MCP connection acts as, opened at start-up and held for its client."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from subagentd.core.service import Service

log = logging.getLogger("subagentd")


class CallerServedElsewhere(Exception):
    """`--caller R` while another live process sharing the database serves R (it holds R live)."""


def open_default_caller(service: Service, agent_id: str) -> None:
    """`--caller` names the session MCP clients act as: make it live (creating a root if new).

    An MCP client cannot run turns, so the root's input is held: whatever is queued for it (a crash
    notice, a report) stays queued and no turn starts unannounced (PROTOCOL.md section 5). One
    root is served by one process: when another live process holds it, this one does not start
    (CallerServedElsewhere), instead of serving a client every write of which would fail."""
    from subagentd.errors import SubagentdError
    from subagentd.schema.host_methods import OpenParams

    owner = service.owner_elsewhere(agent_id)
    if owner is not None:
        host, _, rest = owner.partition(":")
        raise CallerServedElsewhere(
            f"--caller {agent_id} is already served by another subagentd process (pid"
            f" {rest.partition(':')[0]} on {host}) sharing this database; one root is served by"
            " one process: stop that one, or give this one another --caller"
        )
    try:
        service.host.open(OpenParams(agent_id=agent_id), hold=True)
    except SubagentdError as exc:
        log.warning("--caller %s was not opened: %s", agent_id, exc.message)
