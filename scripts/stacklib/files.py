"""The configuration templates beside this module, and files only their owner may read."""

from __future__ import annotations

import os
import string
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "templates"


def template(name: str) -> str:
    """A template's text, verbatim."""
    return (TEMPLATES / name).read_text()


def render(name: str, **values: str | list[str]) -> str:
    """A template filled in: `${name}` takes a value; a line that is only `${name}` with a
    list value becomes that list's lines (none for an empty list); `##` lines are the
    template's own comments and are dropped. Ends with one newline.
    """
    out: list[str] = []
    for line in template(name).splitlines():
        if line.startswith("##"):
            continue
        whole = values.get(line[2:-1]) if line.startswith("${") and line.endswith("}") else None
        if isinstance(whole, list):
            out.extend(whole)
        else:
            out.append(string.Template(line).substitute(values))
    return "\n".join(out) + "\n"


def write_private(path: Path, text: str) -> None:
    """Write `text` to a file only its owner can read, created so from the start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)
