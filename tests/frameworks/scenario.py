"""The delegation loop every framework test plays, as a scripted model would: which tool calls
each of its responses makes, and the texts subagentd answers them with (SEMANTICS.md, PROTOCOL.md
section 5). Plain Python: the LangChain environment imports it too (it has no subagentd)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
FINISHED = "Background subagent {} finished and will do no further work unless you send it more."
STOPPED = "Background subagent {} was stopped before it finished."
NONE_WORKING = "none of the subagents waited for is still working"
WAIT = 50_000  # wait_agents' longest


def server_args(db: str, python: str = sys.executable) -> tuple[str, list[str]]:
    """The command and arguments that serve `root` of `db` with the scripted runner (`python`:
    this project's environment, which has subagentd)."""
    runner = shlex.join([python, str(SCRIPTS / "runner.py")])
    return python, ["-m", "subagentd", "--db", db, "--caller", "root", "--runner", runner]


def watcher(log: Path) -> str:
    """A prompt the scripted runner answers by working until it is stopped (SIGTERM)."""
    return json.dumps({"steps": [{"wait_term": True, "log": str(log)}]})


def wait_for_line(path: Path, line: str, timeout: float = 60) -> None:
    """Until a runner process wrote `line` to `path` (bounded)."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and line in path.read_text().splitlines()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never got {line!r}")
        time.sleep(0.01)


Call = tuple[str, dict]


def delegation(log: Path) -> list[list[Call]]:
    """The first session: two spawns in one response, wait, follow up, wait, list, interrupt,
    wait, an error, then a child whose wait the client's timeout cancels."""
    return [
        [
            (
                "spawn_agent",
                {"label": "summarizer", "prompt": "Summarize the logs.", "child_id": "c1"},
            ),
            ("spawn_agent", {"label": "watcher", "prompt": watcher(log), "child_id": "c2"}),
        ],
        [("wait_agents", {"agent_ids": ["c1"], "timeout_ms": WAIT})],
        [("send_message", {"subagent_id": "c1", "message": "And the errors?"})],
        [("wait_agents", {"agent_ids": ["c1"], "timeout_ms": WAIT})],
        [("list_agents", {})],  # once c2's process runs (wait_for_line(log, "waiting"))
        [("interrupt_agent", {"agent_id": "c2"})],
        [("wait_agents", {"agent_ids": ["c2"], "timeout_ms": WAIT})],
        [("send_message", {"subagent_id": "nobody", "message": "hi"})],
        [
            (
                "spawn_agent",
                {"label": "slow", "prompt": watcher(log.with_suffix(".c3")), "child_id": "c3"},
            )
        ],
        [("wait_agents", {"agent_ids": ["c3"], "timeout_ms": WAIT})],  # the client times it out
    ]


LIST_STEP = 4  # the response that lists: c2 must be running by then
CANCEL_STEP = 9  # the wait the client's timeout cancels


# what each of those calls returns as text (content blocks), in order; None: the client's timeout.
# wait_agents answers one block (a client that shows only the first block loses nothing)
def one(*lines: str) -> list[str]:
    return ["\n".join(lines)]


EXPECTED: list[list[list[str]] | None] = [
    [["started subagent c1"], ["started subagent c2"]],
    [one(FINISHED.format("c1"), "Its closing message:", "done: Summarize the logs.", NONE_WORKING)],
    [["message queued as the next turn for subagent c1"]],
    [one(FINISHED.format("c1"), "Its closing message:", "done: And the errors?", NONE_WORKING)],
    [["c1 [ready, last turn completed] — summarizer\nc2 [running] — watcher"]],
    [["interrupt requested for agent c2"]],
    [one(STOPPED.format("c2"), "Its closing message:", "waiting\nterminated", NONE_WORKING)],
    [['Error: message not delivered: subagent "nobody" is unavailable']],  # isError
    [["started subagent c3"]],
    None,
]

# the second session (a reconnect): what the cancelled wait left queued, then the tree
RECONNECT: list[list[Call]] = [[("wait_agents", {"timeout_ms": 0})], [("list_agents", {})]]
# c3 was stopped when the first session ended; shutdown ends its turn at once, so its closing
# message is there only if its process was quicker
RECONNECT_WAIT = (
    one(STOPPED.format("c3"), "It left no closing message.", NONE_WORKING),
    one(STOPPED.format("c3"), "Its closing message:", "waiting\nterminated", NONE_WORKING),
)
RECONNECT_LIST = (
    "c1 [ready, last turn completed] — summarizer\n"
    "c2 [ready, last turn was stopped] — watcher\n"
    "c3 [ready, last turn was stopped] — slow"
)
FINAL = "All delegated work is collected."
