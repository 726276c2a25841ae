"""A test kit for host authors: subagentd served to a test, a scripted host, notification waits.

Installed with subagentd, its pytest plugin (`subagentd.testing.plugin`, registered by the
`pytest11` entry point) gives every test these fixtures:

- `subagentd_server`: a fresh `subagentd serve --db :memory:` (plus `subagentd_args`, a fixture
  to override), initialized, as a `Served` client; closed after the test, which fails if
  subagentd did not exit 0.
- `scripted_host`: `scripted_host({"c1": ["first reply", "second"]})` is a `ScriptedHost` on that
  server: it answers each agent's turns, in order, from its list of replies.

`Served.wait_for_notification(method, **match)` returns the earliest notification of `method`
whose params hold `match` that no earlier wait returned, one received before the call included.
`assert_replays(path, *serve_args)` replays a transcript (docs/scripts.md). docs/testing.md has a
complete example test.
"""

from subagentd.testing.host import Reply, ScriptedHost, ScriptedHostError, Turn
from subagentd.testing.served import NotificationTimeout, Served, assert_replays

__all__ = [
    "NotificationTimeout",
    "Reply",
    "ScriptedHost",
    "ScriptedHostError",
    "Served",
    "Turn",
    "assert_replays",
]
