"""What an ACP turn used, from what its agent reports (docs/acp.md "Usage").

The agent reports running totals of its session: the prompt's reply `usage {inputTokens,
outputTokens, ...}` (the schema calls each field a total across the session's turns) and
`usage_update` updates whose `cost {amount, currency}` is the session's cumulative cost. A turn
is charged what the totals grew by since the session's previous report; a total smaller than
the previous one means the agent counts afresh (e.g. it was restarted) and is charged in full.
Cost is charged only in the deployment's currency (`--cost-currency`): there is no rate to
convert by, so a cost in another currency, or with no currency named, is recorded, not charged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from subagentd.schema.budgets import Usage

MAX_COUNT = 2**53
MAX_COST = 1e12


@dataclass(slots=True, frozen=True)
class SessionTotals:
    """The running totals an agent last reported for one session (None: never reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None  # in the deployment's currency

    @classmethod
    def stored(cls, data: dict[str, Any]) -> SessionTotals:
        """The totals as `acp_end` `session_usage` keeps them."""
        cost = data.get("cost")
        charged = isinstance(cost, dict) and cost.get("charged") is True
        return cls(
            input_tokens=_count(data.get("input_tokens")),
            output_tokens=_count(data.get("output_tokens")),
            cost=_amount(cost.get("amount")) if charged and isinstance(cost, dict) else None,
        )


def charge(
    before: SessionTotals, reported: Any, cost: Any, currency: str
) -> tuple[Usage | None, dict[str, Any], SessionTotals]:
    """The turn's usage (None: nothing reported), what was reported (for `acp_end`), and the
    session's totals after it. `reported`: the prompt reply's `usage`; `cost`: the last
    `usage_update` cost of the turn."""
    seen: dict[str, Any] = {}
    after = before
    usage = Usage()
    if isinstance(reported, dict):
        for name, field in (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens")):
            total = _count(reported.get(field))
            if total is None:
                continue
            seen[name] = total
            setattr(usage, name, _grown(getattr(before, name), total))
            after = replace(after, **{name: total})
        for name, field in (
            ("thought_tokens", "thoughtTokens"),
            ("cached_read_tokens", "cachedReadTokens"),
            ("cached_write_tokens", "cachedWriteTokens"),
        ):
            if _count(reported.get(field)) is not None:
                seen[name] = reported[field]  # recorded, not charged (see docs/acp.md)
    if isinstance(cost, dict):
        amount = _amount(cost.get("amount"))
        named = cost.get("currency")
        if amount is not None and isinstance(named, str):
            charged = bool(currency) and named.strip().upper() == currency.strip().upper()
            seen["cost"] = {"amount": amount, "currency": named, "charged": charged}
            if charged:
                usage.cost = round(_grown(before.cost, amount), 6)
                after = replace(after, cost=amount)
    if usage.input_tokens is None and usage.output_tokens is None and usage.cost is None:
        return None, seen, after
    return usage, seen, after


def _grown(before: float | None, total: float) -> Any:
    if before is None or total < before:
        return total
    return total - before


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        return None
    return value


def _amount(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 <= value <= MAX_COST:  # NaN fails this too
        return None
    return float(value)
