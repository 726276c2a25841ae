"""MCP resources (PROTOCOL.md section 5): for the caller's subtree only, each agent's state and
last outcome and its transcript, paged; subscriptions. A read consumes nothing."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import msgspec

from subagentd.core import texts
from subagentd.core.resource_reads import MAX_SEQ, REPORT_TAIL, last_report  # noqa: F401
from subagentd.errors import InvalidParamsError
from subagentd.mcp.identity import caller_identity
from subagentd.schema import resources as r
from subagentd.schema.host_methods import Empty, ListParams
from subagentd.wire.call import Call
from subagentd.wire.methods import method

PAGE = 100  # transcript events per page
SCHEME = "subagentd://agent/"
_encode = msgspec.json.encode

TEMPLATES = [
    r.ResourceTemplate(
        uriTemplate="subagentd://agent/{agent_id}",
        name="agent",
        mimeType=r.MIME,
        title="A subagent's state and last outcome",
        description="Status, queued and parked message counts, how its last turn ended (reason"
        " and closing message) and its last report (among its newest 1,000 transcript events),"
        " as JSON. Reading it consumes nothing.",
    ),
    r.ResourceTemplate(
        uriTemplate="subagentd://agent/{agent_id}/transcript{?after}",
        name="transcript",
        mimeType=r.MIME,
        title="A subagent's transcript",
        description=f"Its transcript events in order, {PAGE} a page, as JSON; `next` is the next"
        " page's URI. Reading it consumes nothing.",
    ),
]


def agent_uri(agent_id: str) -> str:
    return SCHEME + quote(agent_id, safe="")


def transcript_uri(agent_id: str, after: int | None = None) -> str:
    uri = agent_uri(agent_id) + "/transcript"
    return uri if after is None else f"{uri}?after={after}"


def parse(uri: str) -> tuple[str, bool, int | None]:
    """(agent id, transcript?, after) of one of ours; InvalidParamsError otherwise."""
    if uri.startswith(SCHEME):
        parts = urlsplit(uri)
        path = uri[len(SCHEME) :].split("?", 1)[0]
        transcript = path.endswith("/transcript")
        agent_id = unquote(path.removesuffix("/transcript"))
        after = parse_qs(parts.query).get("after", [None])[0] if transcript else None
        if agent_id and "/" not in path.removesuffix("/transcript"):
            return agent_id, transcript, None if after is None else _sequence(after)
    raise not_found(uri)


def not_found(uri: str) -> InvalidParamsError:
    """An unknown resource, or one outside the caller's subtree (told apart by nothing)."""
    return InvalidParamsError(f"resource not found: {uri}")


def _sequence(after: str) -> int:
    """A transcript URI's `after`: ASCII digits of a sequence number (a 64-bit integer)."""
    if after.isascii() and after.isdigit() and len(after) <= 19 and int(after) <= MAX_SEQ:
        return int(after)
    raise InvalidParamsError(
        f'invalid after "{texts.shown(after[:64])}" in a transcript URI: a sequence number from'
        f" 0 to {MAX_SEQ}"
    )


def _root(call: Call, meta: dict[str, Any] | None) -> str:
    """The caller, whose subtree the resources are (the tools' rules: `_meta`, else --caller)."""
    identity = caller_identity(call, meta)
    if not identity.caller:
        raise InvalidParamsError("resources need a calling agent (--caller or _meta)")
    return identity.caller


def _checked(call: Call, uri: str, meta: dict[str, Any] | None) -> tuple[str, bool, int | None]:
    agent_id, transcript, after = parse(uri)
    root = _root(call, meta)
    if not call.service.in_subtree(agent_id, root):
        raise not_found(uri)  # outside: as if absent
    return agent_id, transcript, after


@method("resources/list", r.ResourcesListParams, r.ResourcesListResult, writes=False, confined=True)
def resources_list(call: Call, p: r.ResourcesListParams) -> r.ResourcesListResult:
    root = _root(call, p.meta)
    records = call.service.records
    listed = records.list_host(
        ListParams(root_id=root, scope="descendants", cursor=p.cursor, limit=500)
    )
    rows = [(row.id, getattr(row, "label", None)) for row in listed.agents]
    if p.cursor is None:
        rows.insert(0, (root, None))
    resources: list[r.Resource] = []
    for agent_id, label in rows:
        resources.append(
            r.Resource(uri=agent_uri(agent_id), name=agent_id, title=label, mimeType=r.MIME)
        )
        resources.append(
            r.Resource(
                uri=transcript_uri(agent_id),
                name=f"{agent_id} transcript",
                title=label,
                mimeType=r.MIME,
            )
        )
    return r.ResourcesListResult(resources=resources, nextCursor=listed.next_cursor)


@method(
    "resources/templates/list",
    r.ResourcesListParams,
    r.ResourceTemplatesListResult,
    writes=False,
    confined=True,
)
def templates_list(call: Call, p: r.ResourcesListParams) -> r.ResourceTemplatesListResult:
    return r.ResourceTemplatesListResult(resourceTemplates=TEMPLATES)


@method("resources/read", r.ResourceUriParams, r.ResourcesReadResult, writes=False, confined=True)
def resources_read(call: Call, p: r.ResourceUriParams) -> r.ResourcesReadResult:
    agent_id, transcript, after = _checked(call, p.uri, p.meta)
    records = call.service.records
    body: msgspec.Struct
    if transcript:
        page = records.read_transcript(agent_id, after, PAGE)
        following = transcript_uri(agent_id, page.next) if page.next is not None else None
        body = r.TranscriptPage(agent_id=agent_id, events=page.events, next=following)
    else:
        body = _agent(call, agent_id)
    return r.ResourcesReadResult(
        contents=[r.ResourceText(uri=p.uri, mimeType=r.MIME, text=_encode(body).decode())]
    )


def _agent(call: Call, agent_id: str) -> r.AgentResource:
    """agents/get, with how its last turn ended and its last report (read from its transcript)."""
    info = call.service.records.get(agent_id)
    stored = call.service.stored_session(agent_id)
    assert stored is not None
    last = (
        r.LastOutcome(reason=stored.last_reason, output=stored.last_output)
        if stored.last_reason is not None
        else None
    )
    report = call.service.last_report(agent_id)
    return r.AgentResource(**msgspec.structs.asdict(info), last_turn=last, last_report=report)


@method("resources/subscribe", r.ResourceUriParams, Empty, writes=False, confined=True)
def resources_subscribe(call: Call, p: r.ResourceUriParams) -> Empty:
    agent_id, _, _ = _checked(call, p.uri, p.meta)
    subscriptions = call.session.subscriptions
    uris = subscriptions.setdefault(agent_id, [])
    if p.uri not in uris:
        uris.append(p.uri)
    call.service.watch(subscriptions)
    return Empty()


@method("resources/unsubscribe", r.ResourceUriParams, Empty, writes=False, confined=True)
def resources_unsubscribe(call: Call, p: r.ResourceUriParams) -> Empty:
    agent_id, _, _ = parse(p.uri)
    uris = call.session.subscriptions.get(agent_id, [])
    if p.uri in uris:
        uris.remove(p.uri)
    if not uris:
        call.session.subscriptions.pop(agent_id, None)
    return Empty()
