"""What a turn runner's command reads on stdin and what its exit records (PROTOCOL.md section 11)."""

from __future__ import annotations

from subagentd.schema.base import Wire
from subagentd.schema.budgets import Usage
from subagentd.schema.messages import Descriptor, Message


class RunnerTurn(Wire, kw_only=True):
    """One turn, the one JSON object written to the runner command's stdin (then closed)."""

    agent_id: str
    turn_id: str
    messages: list[Message]
    instructions: str | None = None
    resume: Descriptor | None = None


class RunnerFailure(Wire, kw_only=True):
    """How a runner's turn failed, as its parent's notice, the log and the views say it: in its
    turn's `turn_end` and its `settled` events as `runner` (PROTOCOL.md section 11)."""

    status: (
        str  # "exited with status 3", "was killed by signal 9 (SIGKILL)", "could not be started: …"
    )
    stderr_tail: str | None = None  # the last lines it wrote to stderr (bounded), when any


class RunnerExit(Wire, kw_only=True):
    """The `runner_exit` transcript event recorded just before the turn ends."""

    exit_code: int | None = None  # negative: killed by that signal; absent: it never started
    interrupted: bool = False  # turn/interrupt reached it (SIGTERM, SIGKILL after the grace)
    stdout_cut: bool = False  # stdout passed --max-text-bytes: the output is its first part
    stderr: str | None = None  # the last STDERR_TAIL bytes of its stderr, when it wrote any
    usage: Usage | None = None  # what it wrote to $SUBAGENTD_USAGE, summed (turns/end's usage)
    usage_refused: int = 0  # lines of that file that were not a usage object
