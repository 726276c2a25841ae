"""The serve options of subagents' questions (ask_parent, ask_user, ACP ask-parent permission
requests)."""

from __future__ import annotations

from subagentd.cli.spec import Spec

QUESTIONS = (
    Spec(
        "--ask-user",
        "choice",
        "off",
        "serve the ask_user tool: a subagent asks the person behind its tree's root (through"
        " the client's elicitation, or a host's question/ask) and waits",
        choices=("on", "off"),
    ),
    Spec(
        "--question-timeout",
        "duration",
        600.0,
        "seconds a subagent's question (ask_parent, ask_user, an ACP ask-parent permission"
        " request) waits for its answer before it is cancelled; at most an hour (the clients'"
        " calls wait that long)",
        low=0,
        high=3600,
        low_open=True,
        metavar="SECONDS",
    ),
    Spec(
        "--acp-permission-timeout",
        "duration",
        None,
        "the older name of --question-timeout (when given, it sets it)",
        low=0,
        high=3600,
        low_open=True,
        metavar="SECONDS",
    ),
)
