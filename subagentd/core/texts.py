"""Every model-visible text, exactly as SEMANTICS.md fixes it (`—` is U+2014).

Longer than ~300 lines on purpose: one table of every text a model sees, so a wording is
checked against docs/semantics.md in one place.
"""

from __future__ import annotations

REFUSED = "Error: "  # what starts the text of every refused tool call (SEMANTICS.md)

# --- send_message (SEMANTICS.md section 4) ---
SEND_OK = "message queued as the next turn for subagent {id}"
NOT_DELIVERED = "message not delivered: {reason}"
DRAINING_ALL = "continuable subagents are draining; the operation was not admitted"
DRAINING_BELOW = (
    'continuable subagents below parent "{root}" are draining; the operation was not admitted'
)
SEND_STALE = 'subagent "{id}" delivery requires the exact live parent agent'
SEND_OTHER_PARENT = 'subagent "{id}" belongs to another parent session'
SEND_TO_PARENT = (  # a child's send_message to the agent that started it
    'agent "{id}" started you: reach it with the report tool, not send_message'
)
SEND_UNAVAILABLE = 'subagent "{id}" is unavailable'
SEND_NOT_RESUMABLE = (
    'subagent "{id}" has no supported continuation state and cannot be resumed;'
    " do not retry send_message with this id"
)

# --- interrupt_agent (section 5) ---
INTERRUPT_OK = "interrupt requested for agent {id}"
INTERRUPT_STALE = 'interrupting "{id}" requires the exact live ancestor agent'
INTERRUPT_SELF = 'agent "{caller}" cannot interrupt itself'
INTERRUPT_SIBLING = 'subagent "{id}" is a sibling of agent "{caller}", not its descendant'
INTERRUPT_NOT_DESCENDANT = 'subagent "{id}" is not a live descendant of agent "{caller}"'

# --- list_agents (section 6) ---
NO_SUBAGENTS = "(no subagents)"
# a ready child's row says how its last turn ended: `c1 [ready, last turn completed] — label`
LAST_TURN = {
    "completed": "last turn completed",
    "aborted": "last turn was stopped",
    "max-tokens": "last turn ran out of room",
    "refusal": "last turn declined the task",
    "error": "last turn failed",
    "deadline": "last turn ran out of time",
}
LIST_CHILD = "{id} [{status}] — {label}"
LIST_DIAGNOSTIC = "{id} [diagnostic: {reason}]"
LIST_DESCENDANT = "{id} [{status}] parent={parent} depth={depth} — {label}"  # scope descendants
LIST_DESCENDANT_DIAGNOSTIC = "{id} [diagnostic: {reason}] parent={parent} depth={depth}"
LIST_PARKED = "{status}, {count} parked"  # the status of a row holding parked messages
LIST_ENDED = "{status}, {ended}"  # a ready row's status and how its last turn ended

# --- report (section 7) ---
REPORT_OK = "report accepted by the agent that started you as message {message_id}"
REPORT_NOT_REPORTER = 'agent "{id}" is not a live continuable subagent and cannot report'
REPORT_PARENT_NOT_LIVE = "direct parent is not live; report was not delivered"
REPORT_DISPOSING = 'subagent "{id}" activation is being disposed; the report was not delivered'
REPORT_HEADER = "Background subagent {id} reported:"
REPORT_NOT_DELIVERED = "report not delivered: {reason}"  # quota refusals (not in SEMANTICS.md)

# --- arguments and callers (section 3) ---
IDEMPOTENCY_CONFLICT = (
    'idempotency key "{key}" was already used by "{caller}" with different arguments'
)
INVALID_ARGUMENTS = "invalid arguments: {violations}"
MISSING_PROPERTY = 'missing required property "{name}"'
UNKNOWN_PROPERTY = 'unknown property "{name}"'  # an argument the tool does not take
DID_YOU_MEAN = '; did you mean "{name}"?'  # after UNKNOWN_PROPERTY, naming the closest one
MUST_BE_STRING = '"{name}" must be a string'
MUST_BE_INTEGER = '"{name}" must be an integer from {low} to {high}'  # wait_agents' timeout_ms
MUST_BE_STRINGS = '"{name}" must be an array of strings'  # wait_agents' agent_ids
MUST_BE_ONE_OF = '"{name}" must be one of {choices}'
MUST_BE_OBJECT = '"{name}" must be an object'  # spawn_agent's budget
MUST_BE_NUMBER = '"{name}" must be a number from {low} to {high}'  # its max_cost, max_seconds
ARGUMENTS_NOT_OBJECT = '"arguments" must be an object'
NO_CALLER = "{tool} requires a calling agent (caller was not given)"
# Not in SEMANTICS.md (tool filters are the descriptor's; PROTOCOL.md section 5):
TOOL_FILTERED = 'tool "{tool}" is not available to agent "{caller}": its tool_filter excludes it'
# A connection started with --caller acts only for that agent's tree (not in SEMANTICS.md):
CALLER_OUTSIDE = (
    'agent "{caller}" is not "{root}" or a live agent below it;'
    " this connection acts only for that tree (--caller)"
)
RUNNER_TOKEN_REFUSED = (  # `subagentd tool` (PROTOCOL.md section 11)
    'tool call refused: SUBAGENTD_TOKEN is not the token of the running activation of agent "{caller}"'
    " (a runner's command can act only as its own agent, and only while that activation lasts)"
)

# --- spawn (PROTOCOL.md section 4; also the spawn_agent tool's result and refusals) ---
SPAWN_OK = "started subagent {id}"
SPAWN_CALLER_NOT_LIVE = (
    'spawning requires the exact live caller; agent "{caller}" is not live'
    " or its activation is not current"
)
SPAWN_DISPOSING = 'agent "{caller}" activation is being disposed'
SPAWN_DUPLICATE = 'an agent with id "{id}" already exists'
SPAWN_A2A_UNKNOWN = (
    'agent.a2a "{name}" is not an A2A agent this deployment lists (--a2a-agent NAME=URL);'
    " it lists: {names}"
)
SPAWN_A2A_NONE = (
    'agent.a2a "{name}" is not an A2A agent this deployment lists: it lists none'
    " (--a2a-agent NAME=URL)"
)
SPAWN_TOO_DEEP = "spawning below depth {depth} exceeds the maximum depth {max_depth}"

# --- a new agent id (agents/open, agents/spawn, spawn_agent's child_id) ---
ID_REFUSED = "invalid params: {field}: {problem}; {rule}"
ID_EMPTY = "it is empty"
ID_RESERVED = "it starts with @, which is reserved"
ID_TOO_LONG = "it is longer than {limit} bytes"
ID_FORBIDDEN_CHARACTER = "it holds the character U+{code:04X} at index {index}"

# --- wait_agents (PROTOCOL.md section 5; not in SEMANTICS.md) ---
WAIT_NOT_LIVE = (
    'agent "{caller}" is not live or its activation is not current;'
    " only a live agent can wait for its subagents"
)
WAIT_NOT_CHILD = (
    'subagent "{id}" was not started by agent "{caller}";'
    " wait_agents waits only for your own subagents"
)
WAIT_NO_SUBAGENTS = 'agent "{caller}" has no subagents to wait for'
WAIT_STILL_WORKING = "still working: {ids}"
WAIT_NONE_WORKING = "none of the subagents waited for is still working"
WAIT_TIMED_OUT = (
    "wait_agents timed out after {ms} ms; still working: {ids}; call wait_agents again to keep"
    " waiting"
)
WAIT_PROGRESS = "waiting for {ids}"
WAIT_HELD = (
    "held by a budget, nothing more starts under them until it is raised: {held};"
    " the host raises a budget with agents/budget (agents/resume for a stopped tree)"
)
WAIT_HELD_ONE = "{id} ({why})"  # one entry of WAIT_HELD's `{held}`, `, `-separated

# --- a tree held by a budget (wait_agents, list_agents; docs/semantics.md section 11) ---
HELD_WHY = {  # `{owner}`: the agent whose budget it is, when it is not the listed one
    "own": {
        "deadline": "deadline passed",
        "stopped": "stopped by the user",
        "limit": "{budget} budget spent",
    },
    "other": {
        "deadline": 'deadline of "{owner}" passed',
        "stopped": '"{owner}" stopped by the user',
        "limit": '{budget} budget of "{owner}" spent',
    },
}
LIST_HELD = "{status}, held: {why}"  # `top [idle, held: turns budget spent]`


def held_why(agent_id: str, budget: str, owner: str) -> str:
    """Why a tree is held, as wait_agents and list_agents name it."""
    forms = HELD_WHY["own" if owner == agent_id else "other"]
    form = forms.get(budget, forms["limit"])
    return form.format(budget=budget, owner=shown(owner))


# --- settlement notices (section 8) ---
SETTLED_FIRST_LINE = {
    "completed": "Background subagent {id} finished and will do no further work unless you send it more.",
    "aborted": "Background subagent {id} was stopped before it finished.",
    "max-tokens": "Background subagent {id} ran out of room before it finished.",
    "refusal": "Background subagent {id} declined the task.",
    "error": "Background subagent {id} failed before it finished.",
    "deadline": "Background subagent {id} ran out of time: its deadline passed before it finished.",
}
ONE_SHOT_FINISHED = "Background one-shot subagent {id} finished; it takes no further messages."
"""A one-shot child's first line for a root held for an MCP client (it has no delegation call
that would return the output), instead of SETTLED_FIRST_LINE["completed"]."""
# a runner's turn that failed (PROTOCOL.md section 11): after the first line, before the rest
RUNNER_EXITED = "exited with status {code}"
RUNNER_KILLED = "was killed by signal {number} ({name})"
RUNNER_NOT_STARTED = "could not be started: {reason}"
RUNNER_FAILED = (
    "Its runner {status}; the last lines it wrote to stderr follow, between the two"
    " stderr-{token} lines (the runner's own text, not subagentd's):"
)
RUNNER_FAILED_SILENT = "Its runner {status} and wrote nothing to stderr."
RUNNER_FAILED_TO_START = "Its runner {status}."  # RUNNER_NOT_STARTED: it never ran
CLOSING_MESSAGE = "Its closing message:"
NO_CLOSING_MESSAGE = "It left no closing message."
SUMMARY_LIMIT = 120

# --- quotas (SECURITY.md; not in SEMANTICS.md: subagentd's own bounds) ---
# what QUOTA_TOO_LONG names
THE_MESSAGE = "the message"
THE_REPORT = "the report"
THE_LABEL = "the label"
THE_PROMPT = "the prompt"
THE_OUTPUT = "the output"
A_MESSAGE = "a message"
THE_DESCRIPTOR = "the descriptor (persona, model, tool filter, label)"
QUOTA_TOO_LONG = (
    "{what} is {size} bytes, over the limit of {limit} bytes; it was not accepted, make it shorter"
)
QUOTA_CHILDREN = (
    'agent "{id}" already has {limit} live subagents (the limit per parent);'
    " wait until some of them finish"
)
QUOTA_TREE = (
    'the tree of agent "{root}" already has {limit} live agents (the limit per tree);'
    " wait until some of them finish"
)
QUOTA_LIVE = (
    "subagentd already runs {limit} live agents (its limit); wait until some of them finish"
)
QUOTA_INBOX = (
    'agent "{id}" already has {limit} messages waiting (the limit per inbox);'
    " wait until it has taken some"
)
QUOTA_REPORTS = (
    'reports from agent "{id}" used their budget of {limit} bytes per {window} seconds;'
    " send one self-contained report later"
)
QUOTA_DATABASE = "the database reached its size limit of {limit} bytes; nothing was stored"

# --- budgets (SEMANTICS.md section 11) ---
BUDGET_SPENT = (
    'agent "{id}" spent its {budget} budget: {spent} of {limit} {unit} used, {left} left'
    " (what its subagents spend counts against it); nothing more starts under it"
    " until the user raises the budget"
)
BUDGET_UNITS = {"turns": "turns", "spawns": "spawns", "tokens": "tokens"}
BUDGET_COST_UNIT = "cost units"  # cost's unit when the deployment names no --cost-currency
BUDGET_DEADLINE = (
    'the deadline of agent "{id}" passed at {stamp} ({seconds} seconds ago, 0 left; it binds'
    " its subagents too); nothing more starts under it until the user extends it"
)
BUDGET_STOPPED = (
    'agent "{id}" and everything below it were stopped by the user;'
    " nothing starts under it until the user resumes it"
)

# --- permission questions (`--acp-permission ask-parent`; docs/semantics.md section 12) ---
PERMISSION_ASKED = (
    "Background subagent {id} asks your permission for a tool call and waits for your answer:"
    ' "{title}"{kind}.'
)
PERMISSION_KIND = " (kind: {kind})"
PERMISSION_OPTIONS = "Its options: {options}."  # each `<option id> (<name>)`, joined by ", "
PERMISSION_HOW = (
    "Answer with send_message to {id} whose whole message is one option id; if nobody answers"
    " within {seconds} seconds the request is cancelled."
)
PERMISSION_CANCELLED = (
    'The permission request of background subagent {id} ("{title}") was cancelled: {why};'
    " do not answer it."
)
PERMISSION_WHY = {
    "interrupted": "its turn was interrupted",
    "ended": "its turn ended",
    "timeout": "nobody answered within {seconds} seconds",
    "parent": "you were interrupted before you answered",
    "withdrawn": "it stopped waiting for the answer",
    "declined": "your client declined to answer it",  # tasks/update with decline or cancel
    "shutdown": "its turn ended",  # subagentd stopped
}
PERMISSION_ANSWERED = (
    'answered the permission request of subagent {id} with "{option}"; its turn goes on'
)
PERMISSION_NO_OPTION = (
    'subagent "{id}" is waiting for your answer to its permission request "{title}"; the'
    " message must be one of its option ids: {ids}"
)
TITLE_LIMIT = 300  # characters of a tool call's title a permission question shows
OPTION_LIMIT = 100  # characters of an option's id or name a permission question shows
OPTIONS_MORE = "{shown} and {more} more"  # past the 10 options a question lists

# --- ask_parent (docs/semantics.md section 13) ---
QUESTION_ASKED = (
    'Background subagent {id} ("{label}") asks you a question and waits for your answer;'
    " its turn goes on once you answer:"
)
QUESTION_OPTIONS = "It offers these answers: {options}."  # each quoted, joined by ", "
QUESTION_HOW = (
    "Answer with send_message to {id}: your whole message is the answer (free text). If nobody"
    " answers within {seconds} seconds the question is cancelled."
)
QUESTION_CANCELLED = (
    "The question of background subagent {id} was cancelled: {why}; do not answer it."
)
QUESTION_ANSWERED = "answer delivered to subagent {id}; it continues its turn"
LIST_WAITING = "waiting for your answer"  # list_agents: a child whose question is open
LIST_WAITING_FOR = "waiting for an answer from {parent}"  # a deeper one (scope descendants)
# --- ask_user in listings (docs/semantics.md section 14): the asker, and each agent above it
LIST_WAITING_PERSON = "waiting for the person's answer"
LIST_WAITING_BELOW = "waiting: {asker} below it waits for the person's answer"
QUESTION_NOT_ASKED = "question not asked: {reason}"
ASK_ANSWERED = "the agent that started you answered: {answer}"
ASK_ENDED = "no answer to your question: {why}"
ASK_WHY = {
    "interrupted": "your turn was interrupted; stop and wait for your next message",
    "ended": "your turn ended",
    "parent": (
        "the agent that started you was interrupted or finished before it answered;"
        " go on without the answer, or report what you need"
    ),
    "timeout": "nobody answered within {seconds} seconds; go on without the answer, or ask again",
    "shutdown": "subagentd is shutting down",
    "declined": "the agent that started you declined to answer; go on without the answer",
}
ASK_NOT_CHILD = (
    'ask_parent is for subagents: agent "{id}" was not started by another agent (it has no parent'
    " to ask)"
)
ASK_NOT_RUNNING = 'agent "{id}" can ask only while its turn runs'
ASK_PARENT_GONE = (
    "question not asked: the agent that started you is not live (it finished or was closed);"
    " go on without the answer"
)
ASK_OPEN = (
    'question not asked: agent "{id}" already has a question open; wait for its answer before'
    " asking another"
)
ASK_OPTIONS = (
    "question not asked: options takes at most {count} choices of at most {chars} characters each"
)
ASK_EMPTY = "question not asked: the question is empty"
ASK_OPTION_COUNT = 10
ASK_OPTION_CHARS = 200

# --- ask_user (docs/semantics.md section 14) ---
USER_ASKED = 'Subagent {id} ("{label}") asks you:'  # first line of what the person reads
USER_OPTIONS = "Offered answers: {options}."  # each quoted, joined by ", "
USER_ANSWERED = "the person answered: {answer}"
USER_DECLINED = "the person declined to answer; go on without the answer"
USER_CANCELLED = "the person dismissed the question without answering; go on without the answer"
USER_ENDED = "no answer from the person: {why}"
USER_WHY = {
    "interrupted": "your turn was interrupted; stop and wait for your next message",
    "ended": "your turn ended",
    "timeout": "nobody answered within {seconds} seconds; go on without the answer, or ask again",
    "shutdown": "subagentd is shutting down",
}
USER_UNREACHABLE = (
    "no person can be asked: the client of this tree's root ({root}) offers no way to ask one"
    " (an MCP client declares elicitation; a host declares experimental.subagentd.askUser);"
    " go on without the answer"
)
USER_OPEN = (
    'question not asked: agent "{id}" already has a question open; wait for its answer before'
    " asking another"
)
USER_NOT_RUNNING = 'agent "{id}" can ask only while its turn runs'
USER_NO_QUESTION = "question {id} is not open (it was answered or ended, or never asked)"

# --- report guidance for continuable children (turn/start `instructions`) ---
REPORT_INSTRUCTIONS = (
    "You are a background subagent. The agent that started you does not see your transcript,"
    " only what you send it with the `report` tool. Before you finish, call `report` once with a"
    " self-contained answer: what you found or did, and anything it needs to act on. If a partial"
    " finding changes what that agent should do, report it earlier as well. Reporting does not end"
    " your turn; keep working after it until the task is done."
)


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(text: str) -> str:
    """`text` (an id or label) fit for one model-visible line: every control, format (bidi,
    zero-width) or separator character escaped, so no value can forge lines or reorder them."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def summary_of(first_block: str) -> str:
    """A notice's summary: the first block, cut to 119 characters and `…` when longer than 120."""
    if len(first_block) > SUMMARY_LIMIT:
        return first_block[: SUMMARY_LIMIT - 1] + "…"
    return first_block


# --- MCP tasks (PROTOCOL.md section 5, Tasks; not in SEMANTICS.md: the wire's, not a model's) ---
TASK_WORKING = "subagent {id} is working"
# a task whose child's question is open (docs/semantics.md §13, MCP tasks)
TASK_INPUT_REQUIRED = "subagent {id} asks a question and waits for your answer"
INPUT_ANSWER_TITLE = "Answer"  # the one field of a question's elicitation-shaped request
INPUT_FREE_ANSWER = "your answer, as free text"  # its description (ask_parent)
INPUT_OPTION_ANSWER = "the id of the option you choose"  # its description (a permission)
INPUT_BAD_RESPONSE = (
    'inputResponses["{key}"] must be an ElicitResult: action "accept" with content {{"answer":'
    ' <text>}}, or action "decline" or "cancel"'
)
TASK_CANCELLED = (
    "the task was cancelled (tasks/cancel); subagent {id} was asked to stop its current turn,"
    " and what it sends later reaches you through wait_agents"
)
TASK_HELD = (  # a working task whose child's tree a spent budget holds (docs/semantics.md §11)
    "subagent {id} is held by a budget ({why}); nothing more starts under it until it is raised:"
    " the host raises a budget with agents/budget (agents/resume for a stopped tree)"
)
TASK_NOT_FOUND = "task not found: {id}"
TASK_BAD_CURSOR = 'invalid cursor "{cursor}"'
TASK_TERMINAL = "task {id} is already {status}; a finished task cannot be cancelled"
QUOTA_TASKS = (
    'agent "{id}" already has {limit} working tasks (the limit per agent, --max-tasks);'
    " wait until some of them finish"
)

# --- the host API's refusals said in more than one place ---
NO_MESSAGE = 'message "{id}" does not exist'
LIVE_ELSEWHERE = 'agent "{id}" is live in another subagentd process'
