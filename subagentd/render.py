"""The old name of subagentd.message_fences (server/acp_runner.py still imports it)."""

from subagentd.message_fences import RENDER_GUIDE, fence_token, render_messages

__all__ = ["RENDER_GUIDE", "fence_token", "render_messages"]
