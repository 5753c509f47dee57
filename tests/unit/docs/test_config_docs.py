"""The configuration reference (docs/configuration.md) and the README's short table say what
the declarations (flows/config) say.

The page's tables are generated from the declarations (`python -m tools.devkit.docs`), so a
setting added, removed or changed there fails here until the page is written again; the
notes under each table name only declared settings of that table's group, once each. The
README's table of the settings most users set names declared settings with their defaults.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from flows.config import Settings
from flows.config.docs import groups, json_schema, markdown, shown_default, variable
from tests.support.paths import ROOT
from tools.devkit import docs

PAGE = ROOT / "docs" / "configuration.md"
README_TABLE = "Settings most users set"


def declared() -> dict[str, str]:
    """Variable -> the default as the docs write it."""
    return {
        variable(field): shown_default(field) for _, fields in groups() for field in fields.values()
    }


def group_of() -> dict[str, str]:
    return {variable(f): g.__name__ for g, fields in groups() for f in fields.values()}


def sections() -> list[tuple[str, str]]:
    """(title, text) of each `## ` section of the page."""
    parts = re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)[1:]
    return [(part.partition("\n")[0], part) for part in parts]


def test_the_generated_parts_are_up_to_date() -> None:
    stale = [str(p.relative_to(ROOT)) for p in docs.stale(docs.pages())]
    assert stale == [], "out of date: run python -m tools.devkit.docs"


def test_every_settings_group_has_one_table_on_the_page() -> None:
    tables = re.findall(r"<!-- generated: settings (\w+) -->", PAGE.read_text())
    assert sorted(tables) == sorted(g.__name__ for g, _ in groups())


def test_notes_name_declared_settings_of_their_table_once() -> None:
    seen: list[str] = []
    for title, text in sections():
        (group,) = re.findall(r"<!-- generated: settings (\w+) -->", text) or [None]
        for heading in re.findall(r"^### (.+)$", text, flags=re.MULTILINE):
            names = re.findall(r"`([A-Z][A-Z0-9_]*(?:<NAME>)?)`", heading)
            assert names, f"{title}: a note's heading names no setting: {heading}"
            for name in names:
                assert name in declared(), f"{title}: {name} is not a declared setting"
                home = group_of()[name]
                assert home == group, f"{name}: its note belongs under the table of {home}"
            seen += names
    twice = sorted({n for n in seen if seen.count(n) > 1})
    assert twice == []


def test_every_variable_links_to_its_note() -> None:
    text = PAGE.read_text()
    for name, anchor in docs.notes(text).items():
        assert f"[`{name}`](#{anchor})" in text


def readme_rows() -> list[tuple[list[str], str]]:
    """(variables, default) of each row of the README's settings table."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {README_TABLE}\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[0] in ("variable", "---"):
            continue
        rows.append((re.findall(r"`([A-Z][A-Z0-9_]*(?:<NAME>)?)`", cells[0]), cells[1]))
    return rows


def test_the_readme_table_names_declared_settings_with_their_defaults() -> None:
    rows = readme_rows()
    assert 8 <= len(rows) <= 12, "the README lists the settings most users set, not all"
    shown = declared()
    for names, default in rows:
        assert len(names) == 1, names
        (name,) = names
        assert name in shown, f"README: {name} is not a declared setting"
        assert default == shown[name], f"README: {name} defaults to {shown[name]}, not {default}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("key or field:<dotted.path>", "key or `field:<dotted.path>`"),
        ("add __connect.errors.x (default __)", "add `__connect.errors.x` (default `__`)"),
        ("`a|b` stays; not __*)", "`a|b` stays; not `__*`)"),
        ('replacement (default "****"): kept', 'replacement (default "`****`"): kept'),
    ],
)
def test_generated_text_shows_as_written(text: str, shown: str) -> None:
    assert docs.inline(text) == shown


def test_a_table_cell_escapes_its_pipes() -> None:
    assert docs.inline("iso|epoch_ms", cell=True) == "iso\\|epoch_ms"
    with pytest.raises(ValueError, match="inside code"):
        docs.inline("`a|b`", cell=True)


def test_shown_defaults() -> None:
    """The README's notation, from the declared values."""
    shown = declared()
    assert shown["BULK_MAX_BYTES"] == "8 MiB"
    assert shown["ES_VERIFY_CERTS"] == "`true`"
    assert shown["ES_INDEX"] == "`{topic}`"
    assert shown["ES_HOSTS"] == "`http://127.0.0.1:9200`"
    assert shown["SHUTDOWN_TIMEOUT_S"] == "30"
    assert shown["KAFKA_TOPICS"] == "(required)"
    assert shown["ES_PASSWORD"] == ""
    assert shown["KAFKA_CONFIG_<NAME>"] == ""


def test_every_setting_belongs_to_one_group() -> None:
    grouped = [name for _, fields in groups() for name in fields]
    assert len(grouped) == len(set(grouped))
    assert set(grouped) == {
        f.validation_alias for f in Settings.model_fields.values() if f.validation_alias
    }


def test_markdown_lists_every_setting_with_its_doc() -> None:
    text = markdown()
    for _, fields in groups():
        for field in fields.values():
            assert field.description, f"{variable(field)} has no one-line doc"
            assert "\n" not in field.description
            assert f"| `{variable(field)}` | {shown_default(field)} | " in text


def test_json_schema_describes_the_yaml_file() -> None:
    schema = json_schema()
    props = schema["properties"]
    assert schema["additionalProperties"] is False
    assert props["bulk_max_actions"]["minimum"] == 1
    assert props["bulk_max_actions"]["default"] == 5000
    assert props["write_method"]["enum"] == ["index", "create", "upsert", "update", "script"]
    assert props["es_password"]["anyOf"][0]["writeOnly"] is True
    assert "es_index_template" not in props  # read from the file, not a setting
    assert set(props) == {str(n).lower() for _, f in groups() for n in f}


def test_module_cli() -> None:
    def run(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "flows.config", *args],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout

    assert "| `BULK_MAX_ACTIONS` | 5000 |" in run("--markdown")
    assert json.loads(run("--json-schema"))["properties"]["kafka_topics"]
