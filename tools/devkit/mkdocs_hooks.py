"""MkDocs hooks of the manual's site (mkdocs.yml `hooks:`): where Python-Markdown reads a page
otherwise than GitHub does, the site shows what GitHub shows.

- A `|` inside code in a table cell must be written `\\|` (GitHub's tables split on it
  otherwise); GitHub then shows `|`, Python-Markdown `\\|`. The site shows `|`.
"""

from __future__ import annotations

import re
from typing import Any

CELL = re.compile(r"<td\b[^>]*>.*?</td>", re.DOTALL)
CODE = re.compile(r"(<code\b[^>]*>)(.*?)(</code>)", re.DOTALL)


def unescape_pipes(html: str) -> str:
    """`\\|` inside code in a table cell, as `|`."""

    def cell(m: re.Match[str]) -> str:
        return CODE.sub(lambda c: c[1] + c[2].replace("\\|", "|") + c[3], m.group())

    return CELL.sub(cell, html)


def on_page_content(html: str, **_: Any) -> str:
    return unescape_pipes(html)
