"""An ACP agent's `elicitation/create` as a question for its subagent's parent: which forms can be
asked (one field: a string, a number, an integer, a boolean or a choice), and the form's content
the parent's answer (free text) makes. docs/acp.md "Questions" has the decisions."""

from __future__ import annotations

from typing import Any, NamedTuple

DECLINE: dict[str, Any] = {"action": "decline"}
CANCEL: dict[str, Any] = {"action": "cancel"}
KINDS = ("string", "number", "integer", "boolean")
YES, NO = ("yes", "y", "true"), ("no", "n", "false")


class FormField(NamedTuple):
    """A form's one field: its name, its JSON Schema type, the choices it allows (else [])."""

    name: str
    kind: str
    choices: list[str]


def form_field(params: dict[str, Any]) -> FormField | None:
    """The one field of a form elicitation (None: a URL elicitation, no field, or several)."""
    schema = params.get("requestedSchema")
    if params.get("mode") != "form" or not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    ((name, spec),) = properties.items()
    if not isinstance(spec, dict):
        return None
    choices = spec.get("enum")
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        return FormField(str(name), "string", choices)
    kind = spec.get("type")
    return FormField(str(name), kind, []) if kind in KINDS else None


def content_of(field: FormField, answer: str) -> dict[str, Any] | None:
    """The form's content for the parent's answer; None when the answer does not fit the field
    (a number that is none, a choice not offered: the agent is then told `decline`)."""
    text = answer.strip()
    value: Any = text
    if field.choices:
        value = next((c for c in field.choices if c.casefold() == text.casefold()), None)
    elif field.kind == "boolean":
        value = True if text.casefold() in YES else False if text.casefold() in NO else None
    elif field.kind in ("number", "integer"):
        try:
            value = int(text) if field.kind == "integer" else float(text)
        except ValueError:
            value = None
    return None if value is None else {field.name: value}
