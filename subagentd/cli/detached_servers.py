"""`subagentd detached list|stop`: the background processes `serve --detach on` started, found
through their files (cli/detached_files.py), and stopping one.

A pid file is trusted only while the process it names is the one that wrote it: that pid's
start time (/proc/<pid>/stat field 22) is the recorded `process_start`, and the server's lock
file is held. Otherwise nothing is signalled: once the lock can be taken here (so no background
process serves that database and root), the leftover files are removed, the log kept (it
says how the process ended) and named.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import click

from subagentd.cli.detached_files import (
    NAMES,
    directory,
    files_of,
    lock_file,
    lock_held,
    paths,
    read_status,
    remove_files,
    shown_database,
)
from subagentd.runners.runner_pids import stat

STOP_PATIENCE = 60.0  # default seconds `stop` waits for the process and its runs to end
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def survey() -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """The directory, the background processes verified to run there (oldest first), and the
    stale files removed on the way."""
    where = directory()
    keys = sorted({name.split(".", 1)[0] for name in os.listdir(where) if "." in name})
    servers, removed = [], []
    for key in keys:
        files = files_of(os.path.join(where, key))
        status = read_status(files["pid"])
        if status is not None and _verified(status, files):
            started = float(status.get("started") or 0)
            servers.append(
                {
                    "key": key,
                    "pid": status["pid"],
                    "db": str(status.get("db")),
                    "root": str(status.get("root")),
                    "age_s": round(max(0.0, time.time() - started), 1),
                    "clients": int(status.get("clients") or 0),
                    "directory": where,
                    "log": files["log"],
                }
            )
        elif any(os.path.exists(files[n]) for n in NAMES if n != "log"):
            gone = _clean(files, status)
            if gone is not None:
                removed.append({"key": key, **gone})
    servers.sort(key=lambda s: -s["age_s"])
    return where, servers, removed


def _verified(status: dict[str, Any], files: dict[str, str]) -> bool:
    """The pid file's process is the one that wrote it, and it holds the server's lock."""
    found = stat(status["pid"])
    recorded = status.get("process_start")
    if found is None or found.state == "Z" or not recorded or found.started != recorded:
        return False
    return lock_held(files["lock"])


def _clean(files: dict[str, str], status: dict[str, Any] | None) -> dict[str, Any] | None:
    """Remove the files of a background process that is gone, if none holds its lock (one
    that is starting does: left alone); what was removed, or None."""
    lock = lock_file(files["lock"], block=False)
    if lock is None:
        return None
    with lock:
        status = read_status(files["pid"]) or status  # as it is now the lock is ours
        remove_files(files, keep_log=True)
    kept = files["log"] if os.path.exists(files["log"]) else None
    return {"pid": (status or {}).get("pid"), "db": (status or {}).get("db"), "log": kept}


def _say_removed(removed: list[dict[str, Any]]) -> None:
    for gone in removed:
        click.echo(
            f"subagentd detached: removed the files of a background process that is gone"
            f" (key {gone['key']}, pid {gone['pid']})"
            + (f"; its log is kept: {gone['log']}" if gone["log"] else ""),
            err=True,
        )


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def list_servers(as_json: bool) -> int:
    where, servers, removed = survey()
    if as_json:
        click.echo(json.dumps({"directory": where, "servers": servers, "removed": removed}))
        return 0
    _say_removed(removed)
    if not servers:
        click.echo(f"no background process is running (files: {where})")
        return 0
    rows = [("KEY", "PID", "AGE", "CLIENTS", "ROOT", "DATABASE")]
    for s in servers:
        rows.append(
            (s["key"], str(s["pid"]), _age(s["age_s"]), str(s["clients"]), s["root"], s["db"])
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[5]
        )
    click.echo(f"files: {where}")
    return 0


def _described(server: dict[str, Any]) -> str:
    return f"{server['key']} (pid {server['pid']}, root {server['root']}, db {server['db']})"


def _choose(
    servers: list[dict[str, Any]], key: str | None, db: str | None, caller: str | None
) -> dict[str, Any] | str:
    """The one server the arguments name, or why not (one line)."""
    if not servers:
        return "no background process is running"
    chosen = servers
    wanted = []
    if key is not None:
        chosen = [s for s in chosen if s["key"].startswith(key)]
        wanted.append(f"key {key}")
    if db is not None and caller is not None:
        exact = os.path.basename(paths(db, caller)["pid"]).split(".")[0]
        chosen = [s for s in chosen if s["key"] == exact]
    elif db is not None:
        chosen = [s for s in chosen if s["db"] == shown_database(db)]
    elif caller is not None:
        chosen = [s for s in chosen if s["root"] == caller]
    wanted += [f"db {shown_database(db)}"] if db is not None else []
    wanted += [f"root {caller}"] if caller is not None else []
    running = "; ".join(_described(s) for s in servers)
    if not chosen:
        return f"no background process matches {', '.join(wanted)}; running: {running}"
    if len(chosen) > 1:
        return (
            f"{len(chosen)} background processes match; name one by its key (or --db and"
            f" --caller): {'; '.join(_described(s) for s in chosen)}"
        )
    return chosen[0]


def _runs(runs_dir: str) -> dict[int, str]:
    """The run processes recorded in a `.runs/` directory: pid -> start time."""
    found = {}
    try:
        names = os.listdir(runs_dir)
    except OSError:
        return {}
    for name in names:
        try:
            with open(os.path.join(runs_dir, name)) as f:
                found[int(name)] = f.read().strip()
        except (OSError, ValueError):
            continue
    return found


def _running(pid: int, started: str) -> bool:
    found = stat(pid)
    return found is not None and found.state != "Z" and found.started == started


def stop_server(
    key: str | None, db: str | None, caller: str | None, as_json: bool, patience: float
) -> int:
    _, servers, removed = survey()
    if not as_json:
        _say_removed(removed)
    chosen = _choose(servers, key, db, caller)
    if isinstance(chosen, str):
        click.echo(f"subagentd detached stop: {chosen}", err=True)
        return 1
    files = files_of(os.path.join(chosen["directory"], chosen["key"]))
    status = read_status(files["pid"])
    if status is None or status["pid"] != chosen["pid"] or not _verified(status, files):
        click.echo(f"subagentd detached stop: {chosen['key']} stopped meanwhile", err=True)
        return 1
    pid, started = chosen["pid"], str(status["process_start"])
    runs = {p: s for p, s in _runs(files["runs"]).items() if _running(p, s)}
    begun = time.monotonic()
    os.kill(pid, signal.SIGTERM)  # its own shutdown: runs interrupted, files removed
    deadline = begun + patience
    while (
        _running(pid, started)
        or lock_held(files["lock"])
        or any(_running(p, s) for p, s in runs.items())
    ):
        if time.monotonic() > deadline:
            click.echo(
                f"subagentd detached stop: sent SIGTERM to {_described(chosen)}, which has not"
                f" stopped after {patience:g} s; see {files['log']}",
                err=True,
            )
            return 1
        time.sleep(0.05)
    seconds = round(time.monotonic() - begun, 2)
    log_kept = files["log"] if os.path.exists(files["log"]) else None
    if as_json:
        stopped = {k: chosen[k] for k in ("key", "pid", "db", "root")}
        report = {"stopped": stopped, "runs_stopped": len(runs), "seconds": seconds}
        click.echo(json.dumps({**report, "log": log_kept, "removed": removed}))
        return 0
    click.echo(
        f"stopped the background process {_described(chosen)} and its {len(runs)} run"
        f" process(es) in {seconds:g} s"
        + (f"; it stopped on an error: see {log_kept}" if log_kept else "")
    )
    return 0


def _given(ctx: click.Context, name: str, value: str | None) -> str | None:
    """An option given on this command, else before the command (`subagentd --db X detached
    stop`); a SUBAGENTD_* variable does not choose a server."""
    if value is not None:
        return value
    root = ctx.find_root()
    source = root.get_parameter_source(name)
    return root.params.get(name) if source is click.core.ParameterSource.COMMANDLINE else None


@click.group(context_settings=CONTEXT)
def detached() -> None:
    """The background processes `serve --detach on` started: list them, stop one."""


@detached.command("list", context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="print them as one JSON object")
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Each background process: key, pid, age, clients attached, root, database."""
    ctx.exit(list_servers(as_json))


@detached.command("stop", context_settings=CONTEXT)
@click.argument("key", required=False, metavar="[KEY]")
@click.option("--db", metavar="PATH", help="the one serving this database (path or URL)")
@click.option("--caller", metavar="ROOT", help="the one serving this root")
@click.option(
    "--timeout", type=float, default=STOP_PATIENCE, show_default=True, help="seconds to wait"
)
@click.option("--json", "as_json", is_flag=True, help="print what was done as one JSON object")
@click.pass_context
def stop_command(
    ctx: click.Context, key: str | None, db: str | None, caller: str | None, timeout: float,
    as_json: bool,
) -> None:  # fmt: skip
    """Stop one background process cleanly (SIGTERM: its runs are stopped first) and wait
    until it and its runs are gone. KEY (or a prefix) is what `detached list` shows; with
    none, --db and/or --caller choose it, or the only one running."""
    ctx.exit(stop_server(key, _given(ctx, "db", db), caller, as_json, timeout))
