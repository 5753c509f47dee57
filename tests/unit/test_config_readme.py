"""The README's configuration tables match the declarations (flows/config): every declared
setting has a row, every row names declared settings, and the defaults agree."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.config import Settings
from flows.config.docs import groups, json_schema, markdown, shown_default, variable

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("Kafka", "Decoding", "Errors and dead letters", "Elasticsearch", "Status API")
# Declared settings the README documents outside the tables, and where.
ELSEWHERE = {"TRANSFORMS": "`TRANSFORMS=pkg.mod:func"}


def readme_rows() -> list[tuple[str, list[str], str]]:
    """(table, variables, default) of every row of the configuration tables."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for part in section.split("\n### ")[1:]:
        title, _, body = part.partition("\n")
        if title.strip() not in TABLES:
            continue
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 3 or cells[0] in ("variable", "---"):
                continue
            names = re.findall(r"`([A-Z][A-Z0-9_]*(?:<NAME>)?)`", cells[0])
            rows.append((title.strip(), names, cells[1]))
    return rows


def declared() -> dict[str, str]:
    """README variable -> the default as the README writes it."""
    return {
        variable(field): shown_default(field) for _, fields in groups() for field in fields.values()
    }


def same_default(readme: str, shown: str) -> bool:
    """`0 (off)` and `0` agree: the README may explain a default after it in parentheses."""
    if readme == shown:
        return True
    bare = re.sub(r"\s*\([^)]*\)$", "", readme)
    return bool(bare) and bare == shown


def test_the_tables_are_found() -> None:
    tables = {table for table, _, _ in readme_rows()}
    assert tables == set(TABLES)


def test_every_declared_setting_has_one_readme_row() -> None:
    named = [n for _, names, _ in readme_rows() for n in names]
    twice = sorted({n for n in named if named.count(n) > 1})
    assert not twice, f"in more than one README row: {twice}"
    missing = sorted(set(declared()) - set(named) - set(ELSEWHERE))
    assert not missing, f"declared in flows/config but not in the README's tables: {missing}"
    readme = (ROOT / "README.md").read_text()
    for name, mention in ELSEWHERE.items():
        assert mention in readme, f"the README no longer documents {name} ({mention})"


def test_every_readme_row_names_declared_settings() -> None:
    unknown = sorted({n for _, names, _ in readme_rows() for n in names if n not in declared()})
    assert not unknown, f"README rows name settings flows/config does not declare: {unknown}"


@pytest.mark.parametrize(
    ("names", "default"),
    [(names, default) for _, names, default in readme_rows()],
    ids=lambda v: "+".join(v) if isinstance(v, list) else None,
)
def test_readme_defaults_are_the_declared_defaults(names: list[str], default: str) -> None:
    shown = declared()
    parts = default.split(", ") if len(names) > 1 and default else [default] * len(names)
    assert len(parts) == len(names), f"{names}: one default per variable, got {default!r}"
    for name, readme in zip(names, parts, strict=True):
        assert same_default(readme, shown[name]), (
            f"{name}: the README says {readme!r}, flows/config declares {shown[name]!r}"
        )


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
