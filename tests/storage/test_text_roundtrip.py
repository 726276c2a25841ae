"""Whatever text a model or host writes comes back the same from both backends: U+0000 (which
PostgreSQL text cannot hold: the backend writes it escaped, postgres/connection.py), the escape
character itself, and every other code point, in labels, idempotency keys, event types, outputs
and messages; and a string PostgreSQL would once refuse fails no other request of its group.

A property test: the same generated texts go through a SQLite store and a PostgreSQL one, and
each answer is compared with the other backend's and with the text written.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from subagentd.schema.host_methods import Event, SpawnResult
from tests.core_host import CoreHost, sqlite_store

ESC = "\U0010fffe"  # the PostgreSQL backend's escape character (postgres/connection.py)

# any code point but the surrogates (UTF-8 cannot carry them), U+0000 and the escape favoured
TEXT = st.text(
    st.one_of(
        st.sampled_from(["\x00", ESC, "0"]),
        st.characters(blacklist_categories=["Cs"]),
    ),
    min_size=1,
    max_size=12,
)


def written(core: CoreHost, label: str, key: str, event_type: str, output: str) -> dict:
    """One run of writes with the texts, in one commit group; what reads give back."""
    core.open("root")

    def spawn() -> SpawnResult:
        return core.spawn("root", "c1", label=label, prompt=output)

    first = core.svc.idempotent("root", key, "agents/spawn", [label, output], SpawnResult, spawn)
    again = core.svc.idempotent("root", key, "agents/spawn", [label, output], SpawnResult, spawn)
    assert again == first  # the retry with the same key is answered from the stored result
    seq = core.svc.records.append_transcript("c1", None, [Event(type=event_type, data=output)])
    core.end("c1", output=output)
    core.svc.commit()
    session = core.store.get_session("c1")
    events = core.svc.records.read_transcript("c1", None, None).events
    return {
        "label": session.label,
        "output": session.last_output,
        "same_spawn": msgspec.to_builtins(again) == msgspec.to_builtins(first),
        "events": [(e.type, e.data) for e in events if e.seq == seq],
        "listed": core.list("root").text,
    }


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(label=TEXT, key=TEXT, event_type=TEXT, output=TEXT)
def test_every_text_comes_back_the_same_from_both_backends(
    pg_stores, label, key, event_type, output
):
    sqlite = written(CoreHost(store=sqlite_store(None)), label, key, event_type, output)
    postgres = written(CoreHost(store=pg_stores(None)), label, key, event_type, output)
    assert postgres == sqlite
    assert sqlite["label"] == label and sqlite["output"] == output
    assert sqlite["events"] == [(event_type, output)] and sqlite["same_spawn"]


def test_a_nul_in_one_request_fails_no_other_request_of_its_group(pg_stores):
    core = CoreHost(store=pg_stores(None))
    core.open("root")
    core.spawn("root", "c1")
    core.spawn("root", "c2", label="plain")
    core.svc.commit()
    with core.svc.transaction():
        core.end("c2", output="fine")  # another request of the same group
    with core.svc.transaction():
        core.end("c1", output="a\x00b")
    with core.svc.transaction():
        core.spawn("root", "c3", label="nul\x00label", idempotency_key="k\x00")
    core.svc.commit()
    assert core.store.get_session("c2").last_output == "fine"
    assert core.store.get_session("c1").last_output == "a\x00b"
    assert core.store.get_session("c3").label == "nul\x00label"


@pytest.mark.parametrize("text", ["\x00", ESC, ESC + "0", "a\x00" + ESC + ESC + "\x000"])
def test_the_escape_itself_round_trips(pg_stores, text):
    core = CoreHost(store=pg_stores(None))
    core.open("root")
    core.spawn("root", "c1", label=text)
    core.svc.commit()
    assert core.store.get_session("c1").label == text
