"""The parts of the manual that the code declares: `python -m tools.devkit.docs` writes them.

    python -m tools.devkit.docs            # rewrite every generated part of docs/
    python -m tools.devkit.docs --check    # exit 1, naming the pages, when one is out of date

A page marks each part with an HTML comment naming what to generate, and ends it with
`<!-- end generated -->`; everything between the two comments is replaced, the rest of the
page is prose and stays as written:

    <!-- generated: settings KafkaSettings -->   one settings group's table (flows/config)
    <!-- generated: transforms -->               the built-in transforms (flows/transforms)
    <!-- generated: write-methods -->            the write methods (sinks/elasticsearch)

A settings table links a variable to the heading of the same page that names it
(`` ### `VERSION` ``): the notes that say more than the declaration's one line.
`tests/unit/docs/test_config_docs.py` fails when a page differs from what this writes.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

BLOCK = re.compile(
    r"(?P<head><!-- generated: (?P<what>[^>]+?) -->\n)(?P<body>.*?)"
    r"(?P<tail><!-- end generated -->)",
    re.DOTALL,
)
CODE = re.compile(r"(`+)(.+?)\1")
ODD = re.compile(r"[^\s`]*(?:<[^>\s]+>|__|\*)[^\s`]*")
"""A word Markdown would read as HTML (`<name>`) or emphasis (`__x`, `*`): shown as code."""
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
VARIABLE = re.compile(r"`([A-Z][A-Z0-9_]*(?:<NAME>)?)`")
BLOCK_START = re.compile(r"([-*+] |\d+[.)] |#|>|\||=+$)")


def inline(text: str, *, cell: bool = False) -> str:
    """`text` as Markdown that shows it as written: odd words as code, `|` escaped in a cell."""
    out = []
    last = 0
    for m in CODE.finditer(text):
        out.append(_plain(text[last : m.start()], cell))
        if cell and "|" in m.group(2):
            msg = f"a table cell cannot hold `|` inside code: {m.group()!r}"
            raise ValueError(msg)
        out.append(m.group())
        last = m.end()
    out.append(_plain(text[last:], cell))
    return "".join(out)


def _plain(text: str, cell: bool) -> str:
    def code(m: re.Match[str]) -> str:
        word = m.group()
        core = word.strip("(),;:.\"'")
        start = word.index(core) if core else 0
        return f"{word[:start]}`{core}`{word[start + len(core) :]}" if core else word

    text = ODD.sub(code, text)
    return text.replace("|", "\\|") if cell else text


def paragraph(text: str, width: int = 92) -> str:
    """`text` wrapped as the pages are, no line starting what Markdown reads as a block."""
    for w in range(width, width - 20, -1):
        lines = textwrap.wrap(text, w, break_long_words=False, break_on_hyphens=False)
        if not any(BLOCK_START.match(line) for line in lines[1:]):
            return "\n".join(lines)
    msg = f"cannot wrap {text[:40]!r}"
    raise ValueError(msg)


def slug(heading: str) -> str:
    """The anchor GitHub (and the site, `pymdownx.slugs`) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def notes(page: str) -> dict[str, str]:
    """Variable -> the anchor of the heading that names it on `page`."""
    found = {}
    for m in HEADING.finditer(page):
        for name in VARIABLE.findall(m.group(1)):
            found.setdefault(name, slug(m.group(1)))
    return found


def settings_table(group: str, page: str) -> str:
    from flows.config.docs import groups, shown_default, variable

    fields = next((f for g, f in groups() if g.__name__ == group), None)
    if fields is None:
        msg = f"no settings group {group!r} in flows.config"
        raise ValueError(msg)
    linked = notes(page)
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for field in fields.values():
        name = variable(field)
        shown = f"[`{name}`](#{linked[name]})" if name in linked else f"`{name}`"
        doc = inline(field.description or "", cell=True)
        rows.append(f"| {shown} | {shown_default(field)} | {doc} |")
    return "\n".join(rows)


def transforms() -> str:
    from flows.transforms import BUILTINS

    parts = []
    for spec in BUILTINS.values():
        keys = ", ".join(f"`{k}`" for k in sorted(spec.keys))
        parts.append(
            f"### `{spec.name}`\n\n{paragraph(f'Keys: {keys}.')}\n\n{paragraph(inline(spec.doc))}"
        )
    return "\n\n".join(parts)


def write_methods() -> str:
    from sinks.elasticsearch.write_methods import WRITE_METHODS

    def yes(flag: bool) -> str:
        return "yes" if flag else ""

    rows = [
        "| `WRITE_METHOD` | `_bulk` action | does | needs an id | external `VERSION` "
        "| data streams |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in WRITE_METHODS.values():
        rows.append(
            f"| `{m.name}` | `{m.op}` | {inline(m.doc, cell=True)} | {yes(m.needs_id)} "
            f"| {yes(m.allows_external_version)} | {yes(m.allows_data_stream)} |"
        )
    return "\n".join(rows)


def generate(what: str, page: str) -> str:
    kind, _, arg = what.partition(" ")
    if kind == "settings" and arg:
        return settings_table(arg, page)
    if kind == "transforms" and not arg:
        return transforms()
    if kind == "write-methods" and not arg:
        return write_methods()
    msg = f"unknown generated part {what!r}"
    raise ValueError(msg)


def render(page: str) -> str:
    """`page` with every generated part written anew."""

    def fill(m: re.Match[str]) -> str:
        return f"{m['head']}{generate(m['what'], page)}\n{m['tail']}"

    return BLOCK.sub(fill, page)


def pages() -> list[Path]:
    return [p for p in sorted(DOCS.rglob("*.md")) if BLOCK.search(p.read_text())]


def stale(paths: Iterable[Path]) -> list[Path]:
    return [p for p in paths if render(text := p.read_text()) != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.devkit.docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    old = stale(pages())
    for path in old:
        name = path.relative_to(ROOT)
        if args.check:
            print(f"{name}: out of date; run python -m tools.devkit.docs", file=sys.stderr)
        else:
            path.write_text(render(path.read_text()))
            print(f"wrote {name}")
    return 1 if args.check and old else 0


if __name__ == "__main__":
    sys.exit(main())
