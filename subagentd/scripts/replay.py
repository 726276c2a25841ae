"""Replaying transcripts against a fresh subagentd (`subagentd replay`, docs/scripts.md).

Each transcript runs against its own `subagentd serve` process over real pipes: sends are written
in order, each `expect` reads the next frame, then a closing ping (id "script-end") must be the
only thing left, stdin is closed and the exit status must be 0. The first difference stops the
transcript with a report that names the step and shows the expected and the received frame as a
diff; `update=True` instead rewrites every expectation from what was received.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subagentd.client import Client, ConnectionClosed, RequestTimeout
from subagentd.client import frames as wire
from subagentd.scripts.format import (
    END_ID,
    TOO_DEEP,
    Mismatch,
    ScriptError,
    Step,
    dumps,
    masked,
    match,
    merge,
    parse,
    substitute,
)
from subagentd.scripts.record import Placeholders

TIMEOUT = 10.0  # seconds an expect waits for its frame
QUIET = 0.3  # seconds after the closing ping's reply in which nothing more may come
EXIT_TIMEOUT = 10.0  # seconds subagentd has to exit after stdin closes


@dataclass
class Outcome:
    """How one transcript went: `failure` is the readable report (None when it passed)."""

    name: str
    steps: int
    seconds: float = 0.0
    failure: str | None = None
    error: bool = False  # the transcript could not run (malformed), rather than a mismatch
    updated: list[str] | None = None  # with update=True: the new lines
    changed: bool = False

    @property
    def passed(self) -> bool:
        return self.failure is None


@dataclass
class _Run:
    name: str
    client: Client
    timeout: float
    update: bool
    captures: dict[str, Any] = field(default_factory=dict)
    last_send: Step | None = None
    lines: list[str] = field(default_factory=list)
    changed: bool = False
    back: list[Any] = field(default_factory=list)  # a frame --update read ahead
    closed: bool = False  # a close step ended subagentd's input

    def read(self, timeout: float) -> Any:
        if self.back:
            return self.back.pop()
        line = self.client.next_line(timeout)
        try:
            return wire.decode(line)
        except Exception:
            raise _Failed(f"subagentd wrote a line that is not JSON: {line[:200]!r}") from None

    def context(self) -> str:
        if self.last_send is None:
            return ""
        return f"\n  after the send at line {self.last_send.line}: {self.last_send.text.strip()}"


class _Failed(Exception):
    """A transcript's failure; `logs`: subagentd's log tail helps (it went quiet or away)."""

    def __init__(self, message: str, logs: bool = False) -> None:
        super().__init__(message)
        self.logs = logs


def replay(
    path: str | Path,
    serve_args: Sequence[str] = (),
    *,
    db: str = ":memory:",
    timeout: float = TIMEOUT,
    update: bool = False,
    command: Sequence[str] | None = None,
) -> Outcome:
    """Run one transcript against a new `subagentd serve --db DB SERVE_ARGS` (or `command`)."""
    path = Path(path)
    began = time.monotonic()
    try:
        steps = parse(path.read_text(encoding="utf-8"), path.name)
    except (OSError, UnicodeDecodeError, ScriptError) as exc:
        return Outcome(path.name, 0, failure=str(exc), error=True)
    outcome = Outcome(path.name, len(steps))
    # configured by its command line alone: the SUBAGENTD_* variables of whoever runs the replay
    # do not reach it (a transcript means the same on every machine)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENTD_")}
    client = Client.spawn(*serve_args, db=db, command=command, env=env)
    run = _Run(path.name, client, timeout, update)
    try:
        for index, step in enumerate(steps):
            try:
                _step(run, step, steps[index + 1 :])
            except RecursionError:  # parsed, but too deep to substitute, encode or compare
                raise ScriptError(f"line {step.line}: {TOO_DEEP}") from None
        _finish(run)
        code = client.close(EXIT_TIMEOUT)
        if code != 0:
            raise _Failed(f"subagentd exited with status {code} after stdin closed", logs=True)
    except ScriptError as exc:
        outcome.failure, outcome.error = f"{path.name}: {exc}", True
    except _Failed as exc:
        outcome.failure = f"{path.name}: {exc}" + (_logs(client) if exc.logs else "")
    except OSError as exc:  # a send to a subagentd that exited (its stdin is closed)
        said = f"{path.name}: cannot write to subagentd ({exc}){run.context()}"
        outcome.failure = said + _logs(client)
    finally:
        if client.process is not None and client.process.poll() is None:
            client.process.kill()
        client.close(EXIT_TIMEOUT)
    outcome.seconds = time.monotonic() - began
    if update:
        outcome.updated, outcome.changed = run.lines, run.changed
    return outcome


def _key(frame: Any) -> tuple[Any, ...]:
    """What a frame answers or announces: a response's id, a notification's method."""
    if isinstance(frame, list):
        return ("batch",)
    if isinstance(frame, dict) and "method" in frame:
        return ("notification", frame["method"])
    if isinstance(frame, dict):
        return ("response", json.dumps(frame.get("id")))
    return ("other",)


def _update(run: _Run, step: Step, later: Sequence[Step]) -> None:
    """--update: the frame received in this expect's place, aligned by what it answers or
    announces: a frame of a later expect (before the next send) drops this one (no longer sent);
    a frame of none is written as a new expect before it."""
    upcoming: list[tuple[Any, ...]] = []
    for other in later:
        if other.kind in ("send", "send_raw"):
            break
        if other.kind == "expect":
            upcoming.append(_key(other.value))
    while True:
        try:
            frame = run.read(run.timeout)
        except (RequestTimeout, ConnectionClosed):
            run.changed = True  # nothing came for it: the expectation goes
            return
        if _key(frame) == _key(step.value):
            new = merge(step.value, frame, run.captures)
            run.changed |= new != step.value
            run.lines.append(step.text if new == step.value else dumps("expect", new))
            return
        if _key(frame) in upcoming:
            run.back.append(frame)
            run.changed = True
            return
        run.lines.append(dumps("expect", Placeholders(run.captures).received(frame)))
        run.changed = True


def _step(run: _Run, step: Step, later: Sequence[Step]) -> None:
    where = f"line {step.line}"
    if step.kind == "send":
        try:
            frame = substitute(step.value, run.captures)
        except ScriptError as exc:
            raise ScriptError(f"{where}: {exc}") from None
        run.client.send_bytes(wire.encode(frame) + b"\n")
        run.last_send = step
    elif step.kind == "send_raw":
        run.client.send_bytes(step.value.encode() + b"\n")
        run.last_send = step
    elif step.kind == "close":
        process = run.client.process
        if process is not None and process.stdin is not None:
            process.stdin.close()
        run.closed = True
    elif step.kind == "expect" and run.update:
        _update(run, step, later)
        return
    elif step.kind == "expect":
        try:
            frame = run.read(run.timeout)
        except (RequestTimeout, ConnectionClosed) as exc:
            why = "subagentd closed its stdout" if isinstance(exc, ConnectionClosed) else exc
            raise _Failed(
                f"{where}: expected a frame, but {why}{run.context()}\n"
                + _indent("expected:\n" + _pretty(step.value)),
                logs=True,
            ) from None
        try:
            match(step.value, frame, run.captures)
        except Mismatch as exc:
            raise _Failed(
                f"{where}: the frame received does not match the expect\n  {exc}"
                f"{run.context()}\n" + _indent(_diff(step, frame))
            ) from None
    run.lines.append(step.text)


def _finish(run: _Run) -> None:
    """The closing ping: whatever the transcript caused was written before its reply. After a
    close step: nothing more until subagentd closes its stdout."""
    late: list[Any] = []
    if run.closed:
        try:
            while True:
                late.append(run.read(run.timeout))
        except ConnectionClosed:
            pass
        except RequestTimeout:
            raise _Failed(
                f"subagentd did not close its stdout within {run.timeout:g} s", True
            ) from None
        _late(run, late)
        return
    run.client.send_bytes(wire.encode({"jsonrpc": "2.0", "id": END_ID, "method": "ping"}) + b"\n")
    barrier = {"jsonrpc": "2.0", "result": {}, "id": END_ID}
    seen = False
    try:
        while True:
            frame = run.read(QUIET if seen else run.timeout)
            if frame == barrier and not seen:
                seen = True
            else:
                late.append(frame)
    except RequestTimeout:
        if not seen:
            raise _Failed(f"no reply to the closing ping within {run.timeout:g} s", True) from None
    except ConnectionClosed:
        if not seen:
            raise _Failed(
                "subagentd closed its stdout before the closing ping's reply", True
            ) from None
    _late(run, late)


def _late(run: _Run, late: list[Any]) -> None:
    """Frames after the last step: written as expects by --update, else a failure."""
    if late and run.update:
        run.changed = True
        placeholders = Placeholders(run.captures)
        run.lines.extend(dumps("expect", placeholders.received(frame)) for frame in late)
    elif late:
        shown = "\n".join(_pretty(f) for f in late)
        raise _Failed(
            f"after the last step: {len(late)} unexpected frame(s) (a transcript expects"
            f" everything subagentd sends){run.context()}\n" + _indent(shown)
        )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def _diff(step: Step, frame: Any) -> str:
    expected = _pretty(step.value).splitlines()
    received = _pretty(masked(step.value, frame)).splitlines()
    lines = difflib.unified_diff(
        expected, received, f"expected (line {step.line})", "received", n=3, lineterm=""
    )
    return "\n".join(lines)


def _logs(client: Client) -> str:
    tail = client.stderr_text().strip().splitlines()[-8:]
    return ("\n  subagentd's last log lines:\n" + _indent("\n".join(tail))) if tail else ""
