"""What a runaway scripted model achieves before it is stopped, with the default budgets and without.

Every turn of every agent is played by the same model: spawn two subagents (`spawn_agent`), report
to its parent ("spawn more"), and end the turn claiming 800 input and 200 output tokens. Each
child's turns end, children settle, their notices wake their parents, which spawn again: the
fan-out a runaway delegation produces. The live-agent quotas stay on (they bound how many run at
once, not how many run over the tree's life).

    python benchmarks/runaway.py                       # the default budgets
    python benchmarks/runaway.py --tree-max-spawns=0 --tree-max-turns=0 --seconds 60

It stops when no turn is left to run, or after `--seconds` / `--max-turns` (without budgets only
that stops it), and prints one JSON line: turns, spawns, tokens, refusals and seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from typing import Any

from subagentd.client import Client
from subagentd.client.errors import RequestTimeout, RpcError
from subagentd.schema.budgets import Usage

TOKENS_IN, TOKENS_OUT = 800, 200


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-turns", type=int, default=100_000)
    known, serve_args = parser.parse_known_args(argv)
    client = Client.spawn(*serve_args, db=":memory:", stderr="discard")
    starts: deque[dict[str, Any]] = deque()  # every turn/start, in order (the rest is dropped)
    client.on("turn/start", starts.append)
    for method in ("agent/settled", "agent/inject", "turn/interrupt"):
        client.on(method, lambda params: None)
    client.initialize()
    client.agents_open("root")
    client.turns_begin("root", ["run away"])
    counts = {"turns": 0, "spawns": 0, "tokens": 0, "budget_refusals": 0, "quota_refusals": 0}
    refusal = None
    began = time.monotonic()
    while counts["turns"] < known.max_turns and time.monotonic() - began < known.seconds:
        try:
            while not starts:
                client.next_frame(timeout=2.0)
        except RequestTimeout:
            break  # nothing runs any more: the budgets stopped the tree
        start = starts.popleft()
        agent, turn = start["agent_id"], start["turn_id"]
        counts["turns"] += 1
        for _ in range(2):
            try:
                client.call("spawn_agent", {"caller": agent, "label": "w", "prompt": "spawn more"})
                counts["spawns"] += 1
            except RpcError as exc:
                if exc.data and exc.data.get("reason") == "budget":
                    counts["budget_refusals"] += 1
                    refusal = refusal or exc.message
                else:
                    counts["quota_refusals"] += 1
        if agent != "root":
            try:
                client.call("report", {"caller": agent, "output": "spawn more"})
            except RpcError:
                pass
        client.turns_end(agent, turn, usage=Usage(input_tokens=TOKENS_IN, output_tokens=TOKENS_OUT))
        counts["tokens"] += TOKENS_IN + TOKENS_OUT
    seconds = round(time.monotonic() - began, 1)
    tree = client.agents_get("root").tree_usage
    client.close()
    print(
        json.dumps(
            {
                "options": serve_args or ["(defaults)"],
                **counts,
                "tree_usage": {"turns": tree.turns, "spawns": tree.spawns} if tree else None,
                "seconds": seconds,
                "stopped_by": refusal,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
