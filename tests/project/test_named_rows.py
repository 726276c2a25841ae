"""Rows that cross the storage boundary have names (docs/architecture.md "Storage"): no method of
core/store.py's `Store` returns a plain tuple, a row of a list or a dict value included, except
`tree_rows` (the listings' raw rows, converted 10k at a time). The rows are NamedTuples, so the
backends' rows still unpack positionally; both backends return them."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import subagentd
from subagentd.core.store import Store
from subagentd.schema import records
from subagentd.storage.database import SqliteStore

STORE = Path(subagentd.__file__).parent / "core" / "store.py"
PLAIN_ROWS = {"tree_rows"}


def _returns() -> dict[str, str]:
    tree = ast.parse(STORE.read_text())
    (protocol,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Store"]
    return {
        node.name: ast.unparse(node.returns)
        for node in protocol.body
        if isinstance(node, ast.FunctionDef) and node.returns is not None
    }


def test_no_store_method_returns_a_plain_tuple():
    tupled = {
        name: returned
        for name, returned in _returns().items()
        if "tuple[" in returned and name not in PLAIN_ROWS
    }
    assert tupled == {}, f"name these rows in schema/records.py: {tupled}"


def test_the_named_rows_are_named_tuples_of_schema_records():
    named = {
        "OpenTurn",
        "InboxCounts",
        "LeaseRow",
        "OwnerRow",
        "OwnerState",
        "ForeignLease",
        "SignalRow",
        "KeptTrace",
        "ChildListing",
        "EventsPage",
    }
    returned = " ".join(_returns().values())
    for name in named:
        kind = getattr(records, name)
        assert issubclass(kind, tuple) and kind._fields, name
        assert name in returned, f"{name} is not returned by the Store"


def test_the_sqlite_store_returns_named_rows():
    store = SqliteStore(":memory:")
    try:
        counts = store.inbox_counts("nobody")
        assert type(counts) is records.InboxCounts and counts == (0, 0)
        page = store.read_events("nobody", 0, 10, 1000)
        assert type(page) is records.EventsPage and page.events == [] and not page.more
        assert store.get_lease("nobody") is None
    finally:
        store.close()


def test_the_protocol_names_each_row_type():
    hints = typing.get_type_hints(Store.inbox_counts)
    assert hints["return"] is records.InboxCounts
