"""What `subagentd demo` checks and prints of its database: the URL without its password, and
which of the demo's agents it already holds."""

from __future__ import annotations

import urllib.parse

from subagentd.client import Client, RpcError

POSTGRES = ("postgresql://", "postgres://")


def shown(db: str) -> str:
    """`db` as it is printed: a PostgreSQL URL without its password (in the URL or its query)."""
    if not db.startswith(POSTGRES):
        return db
    url = urllib.parse.urlsplit(db)
    user, at, host = url.netloc.rpartition("@")
    netloc = f"{user.partition(':')[0]}{at}{host}"
    query = [(k, v) for k, v in urllib.parse.parse_qsl(url.query) if k != "password"]
    return urllib.parse.urlunsplit(url._replace(netloc=netloc, query=urllib.parse.urlencode(query)))


def demo_sessions(db: str) -> list[str]:
    """Which of the demo's agents a database already holds (one subagentd, no writes)."""
    held = []
    with Client.spawn("--log-level", "warning", db=db) as srv:
        srv.initialize(client_name="subagentd-demo", client_version="1")
        for agent_id in ("root", "c1", "c2", "g1"):
            try:
                held.append(srv.agents_get(agent_id).agent_id)
            except RpcError:
                continue
    return held
