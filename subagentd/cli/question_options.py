"""The serve options of subagents' questions (ask_parent, ACP ask-parent permission requests)."""

from __future__ import annotations

from subagentd.cli.spec import Spec

QUESTIONS = (
    Spec(
        "--question-timeout",
        "duration",
        600.0,
        "seconds a subagent's question (ask_parent, an ACP ask-parent permission request) waits"
        " for its parent's answer before it is cancelled",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
    Spec(
        "--acp-permission-timeout",
        "duration",
        None,
        "the older name of --question-timeout (when given, it sets it)",
        low=0,
        low_open=True,
        metavar="SECONDS",
    ),
)
