"""Logging to stderr only (stdout is the protocol): text, or JSON lines with ms timestamps."""

from __future__ import annotations

import logging
import sys
import time


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts (UTC, milliseconds), level, logger, message[, traceback]."""

    def format(self, record: logging.LogRecord) -> str:
        import json  # here: a text log (the default) needs no json before the handshake's reply

        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
