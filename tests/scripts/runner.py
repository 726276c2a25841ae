"""A scripted turn runner for the tests (`subagentd serve --runner "python tests/scripts/runner.py"`).

It reads the turn (one JSON object) from stdin and acts on the text of its last message: plain
text is answered `done: <text>`; a JSON object {"steps": [...]} runs each step in order:
  {"print": s}            write s to stdout (as given: the tests check the trimming)
  {"repeat": s, "times": n}  write s n times to stdout
  {"stderr": s}           write s to stderr
  {"exit": n}             exit with status n
  {"tool": name, "args": {...}, "caller"?: id, "token"?: t, "env"?: {...}}
                          run `subagentd tool` (as the runner's agent unless caller/token say
                          otherwise); print `<name> -> <status>: <text>` on stdout
  {"append": path, "text": s}   append a line to a file (s may use {agent} and {turn})
  {"wait_file": path}     block until the file exists (bounded, 60 s)
  {"wait_term": true, "log"?: path}
                          print "waiting" (and append it to the log once SIGTERM is handled),
                          block until SIGTERM, then print "terminated" (and append it to the
                          log) and exit 143
  {"ignore_term": true}   ignore SIGTERM from now on
  {"sleep": seconds}      sleep (only to keep a process alive for SIGKILL)
  {"pid": path}           write our pid to the file (written whole: created, then renamed)
  {"background": seconds} start `sleep seconds` holding our stdout and stderr, and go on
  {"env": true}           print the SUBAGENTD_* variables and the turn as one JSON line
  {"usage": s}            append the line s to the file $SUBAGENTD_USAGE names (usage reports)
  {"mcp": [request, ...]} start the MCP server SUBAGENTD_MCP_CONFIG describes (its command, args
                          and env only), send each JSON-RPC message (a line each), print the
                          replies to the requests as one JSON line {"mcp": [...]} (a request
                          with "_noreply": true is sent without waiting for its reply)
  {"verb": [arg, ...]}    run `$SUBAGENTD arg ...`; print `<status>: <output>`
"""

import json
import os
import signal
import subprocess
import sys
import time

turn = json.loads(sys.stdin.read())
agent, turn_id = os.environ["SUBAGENTD_AGENT_ID"], os.environ["SUBAGENTD_TURN_ID"]
text = "".join(block["text"] for block in turn["messages"][-1]["content"])
try:
    plan = json.loads(text)
except ValueError:
    plan = None
if not isinstance(plan, dict) or "steps" not in plan:
    print(f"done: {text}")
    sys.exit(0)


term_log = None  # {"wait_term": true, "log": path} also appends "terminated" there


def on_term(signum, frame):
    print("terminated", flush=True)
    if term_log:
        with open(term_log, "a") as f:
            f.write("terminated\n")
    sys.exit(143)


for step in plan["steps"]:
    if "print" in step:
        sys.stdout.write(step["print"])
        sys.stdout.flush()
    elif "repeat" in step:
        sys.stdout.write(step["repeat"] * step["times"])
        sys.stdout.flush()
    elif "stderr" in step:
        sys.stderr.write(step["stderr"])
        sys.stderr.flush()
    elif "exit" in step:
        sys.exit(step["exit"])
    elif "tool" in step:
        env = {**os.environ, **step.get("env", {})}
        if "token" in step:
            env["SUBAGENTD_TOKEN"] = step["token"]
        argv = [sys.executable, "-m", "subagentd", "tool", step["tool"]]
        argv += [json.dumps(step.get("args", {}))]
        argv += ["--caller", step.get("caller", agent)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        said = (done.stdout + done.stderr).strip()
        print(f"{step['tool']} -> {done.returncode}: {said}", flush=True)
    elif "usage" in step:
        with open(os.environ["SUBAGENTD_USAGE"], "a") as f:
            f.write(step["usage"] + "\n")
    elif "append" in step:
        with open(step["append"], "a") as f:
            f.write(step["text"].format(agent=agent, turn=turn_id) + "\n")
    elif "wait_file" in step:
        deadline = time.monotonic() + 60
        while not os.path.exists(step["wait_file"]) and time.monotonic() < deadline:
            time.sleep(0.02)
    elif "wait_term" in step:
        term_log = step.get("log")
        signal.signal(signal.SIGTERM, on_term)
        print("waiting", flush=True)
        if term_log:  # after the handler is set: a test may interrupt once it reads this
            with open(term_log, "a") as f:
                f.write("waiting\n")
        while True:
            signal.pause()
    elif "ignore_term" in step:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif "background" in step:  # a child left running with our stdout and stderr
        subprocess.Popen(["sleep", str(step["background"])])
    elif "sleep" in step:
        time.sleep(step["sleep"])
    elif "pid" in step:
        with open(step["pid"] + ".part", "w") as f:
            f.write(str(os.getpid()))
        os.replace(step["pid"] + ".part", step["pid"])
    elif "mcp" in step:
        with open(os.environ["SUBAGENTD_MCP_CONFIG"]) as f:
            server = json.load(f)["mcpServers"]["subagentd"]
        env = {"PATH": os.environ.get("PATH", ""), **server["env"]}  # only what the config says
        child = subprocess.Popen(
            [server["command"], *server["args"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None  # both PIPE
        replies = []
        for request in step["mcp"]:
            answered = "id" in request and not request.pop("_noreply", False)
            child.stdin.write(json.dumps(request) + "\n")
            child.stdin.flush()
            if answered:
                replies.append(json.loads(child.stdout.readline()))
        child.stdin.close()
        child.wait(timeout=60)
        print(json.dumps({"mcp": replies}), flush=True)
    elif "verb" in step:
        done = subprocess.run(
            [os.environ["SUBAGENTD"], *step["verb"]], capture_output=True, text=True, timeout=120
        )
        print(f"{done.returncode}: {(done.stdout + done.stderr).strip()}", flush=True)
    elif "env" in step:
        names = ["SUBAGENTD_AGENT_ID", "SUBAGENTD_TURN_ID", "SUBAGENTD_DB", "SUBAGENTD_TOKEN"]
        names += ["SUBAGENTD_SOCKET", "SUBAGENTD", "SUBAGENTD_MCP_COMMAND", "SUBAGENTD_MCP_CONFIG"]
        print(json.dumps({"env": {n: os.environ.get(n) for n in names}, "turn": turn}))
