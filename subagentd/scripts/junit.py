"""Replay outcomes as JUnit XML (`subagentd replay --junit FILE`), which CI systems show per test."""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import quoteattr

from subagentd.scripts.replay import Outcome


def junit(outcomes: Sequence[Outcome], suite: str = "subagentd replay") -> str:
    """The outcomes as JUnit XML: one testcase per transcript, its report as the failure."""
    failures = sum(1 for o in outcomes if o.failure is not None and not o.error)
    errors = sum(1 for o in outcomes if o.error)
    total = sum(o.seconds for o in outcomes)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f"<testsuites tests={quoteattr(str(len(outcomes)))} failures={quoteattr(str(failures))}"
        f" errors={quoteattr(str(errors))} time={quoteattr(f'{total:.3f}')}>",
        f"  <testsuite name={quoteattr(suite)} tests={quoteattr(str(len(outcomes)))}"
        f" failures={quoteattr(str(failures))} errors={quoteattr(str(errors))}"
        f" time={quoteattr(f'{total:.3f}')}>",
    ]
    for o in outcomes:
        head = (
            f"    <testcase classname={quoteattr(suite)} name={quoteattr(o.name)}"
            f" time={quoteattr(f'{o.seconds:.3f}')}"
        )
        if o.failure is None:
            out.append(head + "/>")
            continue
        tag = "error" if o.error else "failure"
        first = o.failure.splitlines()[0]
        out.append(head + ">")
        out.append(f"      <{tag} message={quoteattr(first)}>{_cdata(o.failure)}</{tag}>")
        out.append("    </testcase>")
    out += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(out)


def _cdata(text: str) -> str:
    return "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>"
