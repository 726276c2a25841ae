"""How an ACP agent's reported session totals become a turn's usage (runners/acp_usage.py)."""

from __future__ import annotations

from subagentd.runners.acp_usage import SessionTotals, charge
from subagentd.schema.budgets import Usage


def test_a_turn_is_charged_what_the_session_totals_grew_by():
    before = SessionTotals(input_tokens=100, output_tokens=20, cost=0.25)
    usage, seen, after = charge(
        before, {"inputTokens": 130, "outputTokens": 25}, {"amount": 0.5, "currency": "USD"}, "USD"
    )
    assert usage == Usage(input_tokens=30, output_tokens=5, cost=0.25)
    assert after == SessionTotals(input_tokens=130, output_tokens=25, cost=0.5)
    assert seen["cost"] == {"amount": 0.5, "currency": "USD", "charged": True}


def test_a_total_below_the_last_one_means_the_agent_counts_afresh_and_is_charged_in_full():
    before = SessionTotals(input_tokens=500, output_tokens=50)
    usage, _, after = charge(before, {"inputTokens": 40, "outputTokens": 60}, None, "")
    assert usage == Usage(input_tokens=40, output_tokens=10)
    assert after == SessionTotals(input_tokens=40, output_tokens=60)


def test_cost_outside_the_deployments_currency_is_recorded_not_charged():
    for currency in ("", "EUR"):
        usage, seen, after = charge(
            SessionTotals(), None, {"amount": 2.0, "currency": "USD"}, currency
        )
        assert usage is None
        assert seen == {"cost": {"amount": 2.0, "currency": "USD", "charged": False}}
        assert after == SessionTotals()


def test_what_is_not_a_count_or_an_amount_is_ignored():
    reported = {"inputTokens": -1, "outputTokens": True, "thoughtTokens": "many"}
    usage, seen, after = charge(
        SessionTotals(), reported, {"amount": float("nan"), "currency": "USD"}, "USD"
    )
    assert (usage, seen, after) == (None, {}, SessionTotals())
    usage, seen, _ = charge(SessionTotals(), {"inputTokens": 2**53 + 1, "outputTokens": 3}, [], "")
    assert usage == Usage(output_tokens=3)
    assert seen == {"output_tokens": 3}
