"""Text made safe to show on a terminal: model-written ids, labels and transcripts may carry
escape sequences a terminal would obey, so every non-printable character is shown escaped."""

from __future__ import annotations

import json
from typing import Any


def printable(line: str) -> str:
    """One output line with every control, format (bidi, zero-width) or separator character
    escaped: ids, labels and transcripts are written by models, and a terminal obeys escape
    sequences (window title, clipboard, clear screen); a pipe often ends in one too."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else _escape(c) for c in line)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def json_text(value: Any) -> str:
    """JSON with every non-printable character as a \\u escape (same data, safe to display)."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _json_escape(ord(c)) for c in text)


def _json_escape(code: int) -> str:
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
