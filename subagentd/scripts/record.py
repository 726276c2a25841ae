"""Frames as transcript steps: what `subagentd serve --record` writes (docs/scripts.md).

What the server mints is written as a placeholder so that a replay, where it mints other values,
still matches: every UUID (activation, turn, message ids, and agent ids it chose) becomes
`${turn1}`, `${message2}`, … at first sight (named after its key) and the same placeholder
wherever the value comes back, in frames received and in frames the host sends; timestamps (`at`,
`*_at`) and a string holding a minted id inside its text become `${_}`; `serverInfo.version`
becomes `${version}`.
"""

from __future__ import annotations

import re
from typing import Any

from subagentd.scripts.format import FORMAT_VERSION, PLACEHOLDER, dumps

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
ANY = "${_}"


def _is_time_key(key: str | None) -> bool:
    return key is not None and (key == "at" or key.endswith("_at"))


class Placeholders:
    """Minted values and the placeholders that stand for them (shared by one transcript)."""

    def __init__(self, captures: dict[str, Any] | None = None) -> None:
        self.captures = captures if captures is not None else {}
        self.names: dict[str, str] = {}
        self._sync()

    def _sync(self) -> None:
        """Learn the values recorded meanwhile by matching (`--update` shares the captures)."""
        if len(self.names) != len(self.captures):
            for name, value in self.captures.items():
                if isinstance(value, str) and name != "version":
                    self.names.setdefault(value, name)

    def _name(self, key: str | None) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", key or "id")
        base = base[:-3] if base.endswith("_id") and len(base) > 3 else base
        number = 1
        while f"{base}{number}" in self.captures:
            number += 1
        return f"{base}{number}"

    def received(self, value: Any, key: str | None = None) -> Any:
        """A frame subagentd wrote, as an expectation."""
        self._sync()
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k == "serverInfo" and isinstance(v, dict) and "version" in v:
                    v = {**v, "version": "${version}"}
                    self.captures.setdefault("version", value[k]["version"])
                out[k] = self.received(v, k)
            return out
        if isinstance(value, list):
            return [self.received(v, key) for v in value]
        if not isinstance(value, str) or PLACEHOLDER.match(value):
            return value
        if value in self.names:
            return f"${{{self.names[value]}}}"
        if _is_time_key(key):
            return ANY
        if UUID.fullmatch(value):
            name = self._name(key)
            self.captures[name] = value
            self.names[value] = name
            return f"${{{name}}}"
        if any(found.group(0) in self.names for found in UUID.finditer(value)):
            return ANY
        return value

    def sent(self, value: Any) -> Any:
        """A frame the host wrote, as a send: values subagentd minted become their placeholders."""
        self._sync()
        if isinstance(value, dict):
            return {k: self.sent(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.sent(v) for v in value]
        if isinstance(value, str) and value in self.names:
            return f"${{{self.names[value]}}}"
        return value


class Transcript:
    """Builds a transcript line by line from the frames of one session, in the order they
    crossed stdin and stdout."""

    def __init__(self) -> None:
        self.placeholders = Placeholders()

    def header(self) -> str:
        return dumps("version", FORMAT_VERSION)

    def close(self) -> str:
        return dumps("close", True)

    def comment(self, text: str) -> str:
        return dumps("comment", text)

    def frame_in(self, value: Any) -> str:
        return dumps("send", self.placeholders.sent(value))

    def raw_in(self, text: str) -> str:
        return dumps("send_raw", text)

    def frame_out(self, value: Any) -> str:
        return dumps("expect", self.placeholders.received(value))
