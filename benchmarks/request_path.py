"""Which subagentd modules one send_message passes through, from its frame read to its reply written.

    PYTHONPATH=<checkout> python benchmarks/request_path.py

A real Connection over pipes, a profiler hook naming each module a call enters (consecutive calls
in one module count once); docs/architecture.md quotes its output.
"""

import json
import os
import sys

import anyio

from subagentd.core.service import Service
from subagentd.core.settings import Settings
from subagentd.schema.host_methods import OpenParams, SpawnParams
from subagentd.server.connection import Connection
from subagentd.server.handlers import METHODS
from subagentd.server.handshake import Started
from subagentd.storage.database import SqliteStore
from subagentd.wire.framing import FrameReader
from subagentd.wire.session import Session
from subagentd.wire.transport import FdReader, FdWriter

svc = Service(SqliteStore(":memory:"), Settings())  # the Connection attaches its outlets
svc.recovery.recover()
svc.host.open(OpenParams(agent_id="root"))
svc.host.spawn(SpawnParams(caller="root", child_id="c0", label="x", prompt="go"))
svc.commit()
r, w = os.pipe()
r2, w2 = os.pipe()
conn = Connection(
    svc,
    FdReader(r),
    FdWriter(w2),
    locks=svc.store,
    methods=METHODS,
    handle_signals=False,
    started=Started(FrameReader(), Session(initialized=True)),
)
frame = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "send_message",
    "params": {"caller": "root", "subagent_id": "c0", "message": "hi"},
}
os.write(w, json.dumps(frame).encode() + b"\n")
os.close(w)
# the package's own files only: a checkout named subagentd holds its .venv's site-packages too
package = os.path.dirname(sys.modules["subagentd"].__file__) + os.sep
state = {"on": False, "done": False}
seq = []


def prof(f, event, arg):
    if event != "call" or state["done"]:
        return
    fn = f.f_code.co_filename
    name = f.f_code.co_name
    if fn.startswith(package):
        mod = "subagentd." + fn[len(package) : -3].replace(os.sep, ".")
        if mod.endswith("framing") and name == "feed":
            state["on"] = True
        if state["on"]:
            if not seq or seq[-1] != mod:
                seq.append(mod)
            if mod.endswith("transport") and name in ("write_now", "write"):
                state["done"] = True
    elif state["on"] and "jsonrpcserver" in fn and (not seq or seq[-1] != "jsonrpcserver"):
        seq.append("jsonrpcserver")


sys.setprofile(prof)
anyio.run(conn.serve)
sys.setprofile(None)
print(" -> ".join(seq))
mods = [m for m in seq if m != "jsonrpcserver"]
FIRST_RULE = "subagentd.core.arguments"  # SEMANTICS.md section 3: the tool's arguments
print(
    "distinct subagentd modules:",
    len(set(mods)),
    "; connection entered",
    sum(1 for m in seq if m.endswith("server.connection")),
    "times; steps",
    len(seq),
    "; module changes before the first rule",
    seq.index(FIRST_RULE),
)
