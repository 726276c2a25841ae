"""Python calls per runner turn of `true` through the real server, in all its threads.

    python benchmarks/turn_cost.py [--max-running 1,4,16] [-k 200] [--top 25]

For each --max-running M: `subagentd serve --caller root --runner true --max-running M` is
started under a call counter (this file, run as the server's bootstrap: a profile function in
every thread, the way cProfile counts, Python functions and builtins alike, coroutine resumes
included). K continuable children are spawned and settled, then a warm-up round of K pipelined
`send_message`s; then the counter is switched on (SIGUSR1), K more `send_message`s are written
pipelined (as the runner rows of run.py do), and it is switched off (SIGUSR2) once the K-th
child settled again. Everything the server did in that window is counted: each request read and
dispatched, the turn started and committed, the process started, its output collected, the turn
ended and recorded (Runner.finish), the notifications written. Calls per turn are the window's
calls over K; they are grouped by where the function lives (anyio, asyncio, subprocess and the
other standard modules, subagentd's packages, builtins), with the top functions.

The counts depend on the code, not on the machine's load, except for how many turns the loop
finds ready at once (batching), so they compare before and after a change; run a few times at
M > 1 to see their spread.
"""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["--counted"]:  # the server's bootstrap: count, then run `-m subagentd …`
    sys.path.pop(0)  # this directory's profile.py would shadow the stdlib module
    import collections
    import json
    import os
    import runpy
    import signal
    import threading

    _counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    _on = [False]

    def _counter(thread: str):  # type: ignore[no-untyped-def]
        def count(frame, event, arg):  # type: ignore[no-untyped-def]
            if _on[0]:
                if event == "call":
                    code = frame.f_code
                    _counts[thread, code.co_filename, code.co_name] += 1
                elif event == "c_call":
                    _counts[thread, "<builtin>", getattr(arg, "__qualname__", repr(arg))] += 1

        return count

    def _switch(signum, _frame):  # type: ignore[no-untyped-def]
        out = os.environ["TURN_COST_OUT"]
        if signum == signal.SIGUSR1:
            _counts.clear()
            _on[0] = True
            with open(out + ".on", "w"):
                pass
        else:
            _on[0] = False
            rows = [[t, f, n, c] for (t, f, n), c in _counts.items()]
            with open(out + ".tmp", "w") as fh:
                json.dump(rows, fh)
            os.rename(out + ".tmp", out)

    signal.signal(signal.SIGUSR1, _switch)
    signal.signal(signal.SIGUSR2, _switch)
    threading.setprofile(_counter("other"))
    sys.setprofile(_counter("main"))
    assert sys.argv[2] == "-m"
    sys.argv = [sys.argv[3], *sys.argv[4:]]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    raise SystemExit(0)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

from harness import Server, server_command  # noqa: E402
from scale import _until_idle, follow_ups, idle_children  # noqa: E402

HERE = os.path.abspath(__file__)
STDLIB = os.path.dirname(os.__file__)


def _wait_file(path: str, deadline: float) -> None:
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.005)


def group(filename: str) -> str:
    """Where a counted function lives: a package of subagentd, a library, a standard module."""
    if filename == "<builtin>":
        return "builtins"
    parts = filename.replace("\\", "/").split("/")
    if "subagentd" in parts:
        rest = parts[len(parts) - 1 - parts[::-1].index("subagentd") :]
        return ".".join(rest[:2]).removesuffix(".py")
    for lib in ("anyio", "msgspec", "jsonrpcserver", "sqlite_utils", "psycopg"):
        if lib in parts:
            return lib
    if filename.startswith(STDLIB):
        rel = os.path.relpath(filename, STDLIB).split(os.sep)
        return rel[0].removesuffix(".py")
    return filename


def count(tmp: str, running: int, k: int) -> Counter[tuple[str, str, str]]:
    """The server's calls over K pipelined runner turns at --max-running `running`."""
    db = os.path.join(tmp, f"turns-{running}-{time.monotonic_ns()}.db")
    out = os.path.join(tmp, f"counts-{running}-{time.monotonic_ns()}.json")
    command = server_command("subagentd", db)
    command += ["--caller", "root", "--runner", "true", "--max-running", str(running)]
    server = Server(command, prefix=[HERE, "--counted"], env={"TURN_COST_OUT": out})
    try:
        deadline = time.perf_counter() + 600
        ids = idle_children(server, k, deadline)
        for counted in (False, True):
            sends = follow_ups(server, ids)
            if counted:
                os.kill(server.proc.pid, signal.SIGUSR1)
                _wait_file(out + ".on", time.monotonic() + 30)
            server.write(sends)
            _until_idle(server, set(ids), deadline)
        os.kill(server.proc.pid, signal.SIGUSR2)
        _wait_file(out, time.monotonic() + 30)
        with open(out) as fh:
            rows = json.load(fh)
        server.close(timeout=60)
    finally:
        server.kill()
    return Counter({(t, f, n): c for t, f, n, c in rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--max-running", default="1,4,16")
    parser.add_argument("-k", type=int, default=200, help="turns counted per --max-running")
    parser.add_argument("--top", type=int, default=25, help="functions listed (0: none)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="subagentd-turn-cost-")
    try:
        for running in [int(m) for m in args.max_running.split(",")]:
            counts = count(tmp, running, args.k)
            total = sum(counts.values())
            main = sum(n for (thread, _f, _n), n in counts.items() if thread == "main")
            groups: Counter[str] = Counter()
            functions: Counter[tuple[str, str]] = Counter()
            for (_thread, filename, name), n in counts.items():
                groups[group(filename)] += n
                functions[group(filename), name] += n
            print(
                f"--max-running {running}: {total / args.k:,.0f} calls per turn ({args.k} turns;"
                f" {main / args.k:,.0f} in the main thread, {(total - main) / args.k:,.0f} in others)"
            )
            for name, n in groups.most_common():
                if n / args.k >= 1:
                    print(f"  {n / args.k:7.1f}  {name}")
            if args.top:
                print(f"  top {args.top} functions, calls per turn:")
                for (where, name), n in functions.most_common(args.top):
                    print(f"  {n / args.k:7.1f}  {where}: {name}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
