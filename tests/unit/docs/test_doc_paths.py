"""The docs name only files that exist: README.md, CHANGELOG.md, docs/**/*.md, the Dockerfile,
and the docstrings and comments of the product and its tools.

A repository path is a word that starts with a top-level directory of the repository
(`flows/config/fields.py`, `docs/deploy.md`, `scripts/bench`, `tests/unit/`). Each one
must exist as written. A path that goes on into a placeholder (`docs/bench/{name}.json`,
`flows/decode/<format>.py`, `tests/unit/test_*.py`) needs its directory to exist. Relative
Markdown links resolve from the page that holds them.

Outside the tests, they also name no tracker ids or work sessions ("review F2", "issue 15",
"design weakness 8", "sixth session"): a newcomer cannot look those up, so the text gives
the reason instead.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT

CODE_DIRS = ("flows", "sinks", "tools", "scripts", "tests")
"""Whose docstrings and comments are read."""

NOT_SOURCE = {".git", ".venv", "venv", "build", "dist", "recovery", "site"}
TOP = sorted(
    p.name
    for p in ROOT.iterdir()
    if p.is_dir()
    and not p.name.startswith(".")
    and p.name not in NOT_SOURCE
    and not p.name.endswith(".egg-info")
)
PATH = re.compile(rf"(?<![\w./:~$@-])(?:{'|'.join(TOP)})/[\w./-]*")
PLACEHOLDER = "<{*[$%"
UNITS = {"docs/s"}
"""Words shaped like paths that are not: documents per second."""
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if p.is_file()]


def code_files() -> list[Path]:
    files = []
    for top in CODE_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix == ".py" or (top == "scripts" and _is_script(path)):
                files.append(path)
    return files


def _is_script(path: Path) -> bool:
    return not path.suffix and path.read_bytes()[:2] == b"#!"


def _is_python(path: Path) -> bool:
    return path.suffix == ".py" or path.read_text().startswith("#!/usr/bin/env python")


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of what a reader reads as words: a page's lines, a module's docstrings
    (any string statement, so attribute docstrings too) and comments, a script's comments."""
    text = path.read_text()
    if path.suffix == ".md" or path.name == "Dockerfile":
        yield from enumerate(text.splitlines(), 1)
    elif _is_python(path):
        for node in ast.walk(ast.parse(text, str(path))):
            if (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for i, line in enumerate(node.value.value.splitlines()):
                    yield node.lineno + i, line
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
    else:  # a shell script: its comments
        for n, line in enumerate(text.splitlines(), 1):
            m = re.search(r"(?:^|\s)#(?!!)(.*)", line)
            if m:
                yield n, m.group(1)


def missing(line: str) -> Iterator[str]:
    """The repository paths `line` names that do not exist."""
    for m in PATH.finditer(line):
        path = m.group()
        if line[m.end() : m.end() + 1] in tuple(PLACEHOLDER):
            path = path.rsplit("/", 1)[0]  # its directory: the rest is a placeholder
        path = path.rstrip(".-")
        if path not in UNITS and not (ROOT / path).exists():
            yield path


def broken_links(page: Path, line: str) -> Iterator[str]:
    """The Markdown link targets in `line` that name no file, or no heading of a page."""
    for target in LINK.findall(line):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        name, _, anchor = target.partition("#")
        linked = page.parent / name if name else page
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors(linked)
        ):
            yield target


@functools.cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub gives a page's headings (code blocks hold no heading)."""
    found: list[str] = []
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"#{1,6} (.+)", line)
        if heading and not fenced:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            n = seen[slug] = seen.get(slug, -1) + 1  # a repeated heading's anchor gets -1, -2
            found.append(f"{slug}-{n}" if n else slug)
    return frozenset(found)


def problems(path: Path) -> Iterator[str]:
    if not PATH.search(text := path.read_text()) and not LINK.search(text):
        return  # most modules name no path: no need to read them closely
    for n, line in prose(path):
        names = []
        if path.suffix == ".md":
            names += broken_links(path, line)
            line = LINK.sub("]()", line)  # a link's target resolves from its page, above
        names += missing(line)
        yield from (f"{path.relative_to(ROOT)}:{n}: {name}" for name in names)


SOURCES = [*markdown_pages(), ROOT / "Dockerfile", *code_files()]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_path_exists(path: Path) -> None:
    assert list(problems(path)) == []


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("see flows/config.py and docs/nowhere.md", ["flows/config.py", "docs/nowhere.md"]),
        (
            "`scripts/no-such-script`, tests/unit/gone/",
            ["scripts/no-such-script", "tests/unit/gone/"],
        ),
        ("flows/config/fields.py:138, flows/kafka/source.py::next_batch.", []),
        ("docs/bench/{name}.json and tests/unit/test_*.py, flows/decode/<format>.py", []),
        ("docs/nowhere/{name}.json", ["docs/nowhere"]),
        ("https://example.com/flows/config.py and owner/repo:docs/x.md", []),
        ("flows/ and sinks/, scripts/bench.", []),
        ("2,000 docs/s", []),
    ],
)
def test_what_counts_as_a_path(line: str, named: list[str]) -> None:
    assert list(missing(line)) == named


def test_a_link_needs_its_page_and_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# The method (2 cores)\n\n## Runs\n\n```\n# not a heading\n```\n## Runs\n")
    line = "[a](page.md#the-method-2-cores) [b](#runs-1) [c](#not-a-heading) [d](gone.md)"
    assert list(broken_links(page, line + " [e](#runs-2)")) == [
        "#not-a-heading",
        "gone.md",
        "#runs-2",
    ]
    assert list(broken_links(page, "[web](https://example.com/x.md#y)")) == []


TRACKER = re.compile(
    r"\b(?:review(?: finding|,? design weakness)? ?F?\d+|[Ii]ssue \d+|design weakness \d+"
    r"|[FW]\d{1,2}|(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) session)\b"
)
"""A finding of a past review, an item of an issue tracker, a work session: not upstream
bug numbers, which name their project (`librdkafka issue #5301`)."""


@pytest.mark.parametrize(
    "path",
    [p for p in SOURCES if p.relative_to(ROOT).parts[0] != "tests"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_tracker_ids(path: Path) -> None:
    if not TRACKER.search(path.read_text()):
        return
    found = [f"{n}: {m.group()}" for n, line in prose(path) for m in TRACKER.finditer(line)]
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "(review finding F8)",
        "issue 15, item 3",
        "review, design weakness 8",
        "the F1 window",
        "(2026-12-05, sixth session)",
        "Issue 14's targets",
    ],
)
def test_what_counts_as_a_tracker_id(line: str) -> None:
    assert TRACKER.search(line)


@pytest.mark.parametrize(
    "line", ["librdkafka issue #5301", "elasticsearch-py issues 2923, 2927", "F-strings", "F"]
)
def test_what_does_not(line: str) -> None:
    assert not TRACKER.search(line)


ABSOLUTE = re.compile(r"(?<![\w.-])/(?:work|home|Users|root)/[\w.-]+")
"""A path into somebody's workstation: nobody else has it."""


def test_no_file_points_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {m}"
        for path in [*markdown_pages(), *code_files()]
        for n, line in prose(path)
        for m in ABSOLUTE.findall(line)
    ]
    assert found == []
