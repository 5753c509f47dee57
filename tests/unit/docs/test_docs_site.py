"""The site of the manual (mkdocs.yml) shows what GitHub shows; `scripts/check` builds it with
`--strict`, which fails on a broken link or anchor and on a page left out of the nav."""

from __future__ import annotations

import yaml

from tests.support.paths import ROOT
from tools.devkit.mkdocs_hooks import unescape_pipes


def test_a_pipe_in_code_in_a_table_cell_shows_as_a_pipe() -> None:
    html = (
        "<table><tr><td><code>a\\|b</code> c\\|d</td></tr></table>"
        "<pre><code>grep 'a\\|b'</code></pre>"
    )
    assert unescape_pipes(html) == (
        "<table><tr><td><code>a|b</code> c\\|d</td></tr></table>"
        "<pre><code>grep 'a\\|b'</code></pre>"
    )


def test_the_nav_lists_every_page_once() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [p for item in nav for p in pages(item)]
        if isinstance(nav, dict):
            return [p for value in nav.values() for p in pages(value)]
        return []

    listed = pages(config["nav"])
    assert config["docs_dir"] == "docs" and config["strict"] is True
    assert sorted(listed) == sorted(
        str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")
    )
