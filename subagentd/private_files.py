"""Files that hold conversation (recordings, timelines, replay reports) are private to their user.

A new file is created mode 0600 whatever the umask (a umask can only narrow it), and a directory
subagentd creates for such files is 0700; an existing file keeps the mode its owner gave it.
"""

from __future__ import annotations

import os
from typing import IO, Any

FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


def open_private(path: str, **text: Any) -> IO[str]:
    """`path` opened for writing text (truncated), created 0600 when new."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    file: IO[str] = open(fd, "w", **text)  # noqa: SIM115 (the caller closes it)
    return file


def write_private(path: str, text: str, **options: Any) -> None:
    with open_private(path, **options) as file:
        file.write(text)


def private_directory(path: str) -> None:
    """`path` made (with its missing parents) when absent; the directory made is 0700."""
    os.makedirs(path, mode=DIRECTORY_MODE, exist_ok=True)
