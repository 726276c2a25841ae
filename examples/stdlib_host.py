"""The README's wire exchange from a script, with nothing but the Python standard library:
spawn subagentd, open a root, spawn a child, run its turn, read the root's next turn."""

import json
import shutil
import subprocess

server = subprocess.Popen(  # :memory: starts empty each run; a file keeps the agents
    [shutil.which("subagentd"), "--db", ":memory:"],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
)


def read(wanted):
    """The next message from subagentd that `wanted` accepts (this sketch skips the others)."""
    while not wanted(message := json.loads(server.stdout.readline())):
        pass
    return message


def call(request_id, method, params):
    request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    server.stdin.write(json.dumps(request) + "\n")
    server.stdin.flush()
    reply = read(lambda m: m.get("id") == request_id)
    if "error" in reply:  # e.g. 1006 when child_id "c1" already exists in the database
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]


call(1, "initialize", {})
call(2, "agents/open", {"agent_id": "root"})
task = {
    "caller": "root",
    "child_id": "c1",
    "label": "researcher",
    "prompt": "Find the oldest open bug.",
}
call(3, "agents/spawn", task)
turn = read(lambda m: m.get("method") == "turn/start")["params"]
print(turn["agent_id"], "was asked:", turn["messages"][0]["content"][0]["text"])
# ... your model runs the turn here; its tool calls map to send_message, report, ...
end = {"agent_id": "c1", "turn_id": turn["turn_id"], "reason": "completed", "output": "Bug #1."}
call(4, "turns/end", end)
notice = read(lambda m: m.get("method") == "turn/start")["params"]  # root's next turn
print(notice["agent_id"], "was told:", notice["messages"][0]["content"][0]["text"])
server.stdin.close()  # end of input: subagentd stops what is live, commits and exits 0
assert server.wait() == 0
