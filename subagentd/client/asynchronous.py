"""The async client (anyio): spawn subagentd or attach to byte streams; typed methods as awaitables.

The same methods as the blocking `Client`, named after their wire names (`agents/spawn` is
`agents_spawn`), each taking its schema Struct's fields and returning its result Struct
(generated: `subagentd/client/methods.py`); many may be in flight at once from many tasks. The
transport is `Streams`.
"""

from __future__ import annotations

from subagentd.client.methods import AsyncMethods


class AsyncClient(AsyncMethods):
    """`async with AsyncClient.spawn(db=...) as client:` starts subagentd and connects to it."""
