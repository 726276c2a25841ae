"""Whether each connection keeps one server session: what a pooler in transaction (or statement)
pooling mode does not give, and subagentd needs (PROTOCOL.md section 7, "Behind a pooler").

The main connection's settings are made once, at connect (statement_timeout, jit); LISTEN holds
the doorbell's channel on its own connection; psycopg prepares a statement run often, on that
session. Through PgBouncer's transaction pooling each transaction may run on another server
session: those settings, the channel and the prepared statements are not there. So start-up
asks: two client connections, the first sets a session-level value, the second opens a
transaction and holds it; then the first reads its value back. One session per connection, the
second never sees the value and the first always does; pooled per transaction, the second gets
the server session the first just let go (PgBouncer hands out the most recently used one) and
sees the value, or the first finds it gone while the second holds that session. A statement
pooler refuses the transaction itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import psycopg

PROBE = "subagentd.session_probe"  # a custom setting (a dotted name needs no declaration)


def shares_sessions(connect: Callable[[], psycopg.Connection[Any]]) -> bool:
    """True when two connections made by `connect` are not each one server session (a pooler
    in transaction or statement pooling mode); False for a direct connection or session
    pooling. A driver error other than the pooler's refusal is raised."""
    token = secrets.token_hex(8)
    first = connect()
    try:
        first.execute("SELECT set_config(%s, %s, false)", (PROBE, token))
        second = connect()
        try:
            second.autocommit = False
            try:
                seen = second.execute("SELECT current_setting(%s, true)", (PROBE,)).fetchone()
            except psycopg.errors.FeatureNotSupported:  # "transaction blocks not allowed"
                return True
            except psycopg.OperationalError as exc:
                if "statement pooling" in str(exc) or "transaction blocks" in str(exc):
                    return True
                raise
            mine = first.execute("SELECT current_setting(%s, true)", (PROBE,)).fetchone()
            second.rollback()
        finally:
            second.close()
    finally:
        first.close()
    return (seen is not None and seen[0] == token) or mine is None or mine[0] != token
