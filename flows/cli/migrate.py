"""`es-sink migrate config` and `es-sink migrate offsets`: take over from a Kafka Connect
Elasticsearch sink connector.

`config` reads the connector's configuration (a JSON or `.properties` file, or a running
worker's REST API), prints the flow's ES_SINK_CONFIG on stdout and a row per option on
stderr (all of it as JSON with `--json`); the settings it prints are checked as `es-sink
check --offline` checks them. Exit 1 when an option cannot be carried over faithfully.

`offsets` copies the connector's committed offsets (`--from-group connect-<name>`) to the
flow's group, refused while the connector's group has members or either group's commits
move (`flows.cli.migrate_offsets`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from flows.cli import common
from flows.cli.common import Problem, Usage
from flows.errors import ConfigError

if TYPE_CHECKING:
    from flows.migrate.connector import Connector
    from flows.migrate.report import Row
    from flows.migrate.translate import Migration

migrate_app = typer.Typer(
    help="Take over from a Kafka Connect Elasticsearch sink: its configuration, its offsets.",
    no_args_is_help=True,
)

WIDE = 120
"""Below this many columns (a pipe: 80) each option is a block of lines, not a table row."""
PLACEHOLDERS = {"SCHEMA_REGISTRY_URL": "http://schema-registry.invalid:8081"}
"""What a secret the settings name stands for while they are checked (any text will do,
except where the setting reads a URL)."""


def _connector(
    source: str | None, connect_url: str | None, name: str | None, worker: str | None
) -> Connector:
    from flows.migrate import connector

    if connect_url is not None or name is not None:
        if source is not None:
            raise Usage("SOURCE: give a file, or --connect-url with --connector, not both")
        if connect_url is None or name is None:
            raise Usage("--connect-url and --connector go together")
        found = connector.read_rest(connect_url, name)
    elif source is None:
        raise Usage(
            "SOURCE: a connector's JSON or .properties file (- for stdin), or "
            "--connect-url URL --connector NAME"
        )
    else:
        text = typer.get_text_stream("stdin").read() if source == "-" else None
        found = connector.read_file(source, text)
    if worker is not None:
        found.worker = connector.read_worker(worker)
    return found


def _partitions(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Each topic's partition count, asked of Kafka (`--bootstrap-servers`)."""
    from flows.config import Settings

    settings = Settings.load(
        {"KAFKA_TOPICS": ",".join(topics) or "-", "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    )
    found = common.reachable_topics(settings)
    return {t: len(found[t].partitions) for t in topics if t in found and found[t].error is None}


def check_settings(m: Migration, text: str) -> list[str]:
    """The problems `es-sink check --offline` finds in the settings `text` (the secrets they
    name given placeholder values)."""
    from flows.cli.check import run_checks
    from flows.config import Settings

    with tempfile.TemporaryDirectory(prefix="es-sink-migrate-") as tmp:
        path = Path(tmp) / "es-sink.yaml"
        path.write_text(text)
        env = {"ES_SINK_CONFIG": str(path)}
        env.update({k: PLACEHOLDERS.get(k, "placeholder") for k in m.environment})
        try:
            settings = Settings.load(env)
        except ConfigError as e:
            return list(getattr(e, "problems", [str(e)]))
        report = run_checks(settings, offline=True)
        return report.problems


def _rows_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [r.as_json() for r in rows]


def _print_rows(rows: list[Row]) -> None:
    from rich.table import Table

    from flows.migrate.report import STATUSES

    console = common.err
    if console.width >= WIDE:
        table = Table(
            "option",
            "value",
            "status",
            "flow setting",
            "note",
            title="the connector's options",
            title_justify="left",
        )
        for r in rows:
            table.add_row(*map(common.cell, (r.option, r.value or "", r.status, r.setting, r.note)))
        console.print(table)
    else:
        for r in rows:
            head = f"{r.option} = {r.value}" if r.value is not None else r.option
            console.print(head, highlight=False, markup=False)
            status = f"  {r.status}" + (f": {r.setting}" if r.setting else "")
            console.print(status, highlight=False, markup=False)
            if r.note:
                console.print(f"  {r.note}", highlight=False, markup=False)
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    console.print(f"{len(rows)} options: {summary}", highlight=False, markup=False)


@migrate_app.command("config")
def config(
    source: str | None = typer.Argument(
        None, help="The connector's JSON (as POSTed to /connectors) or .properties; - reads stdin."
    ),
    connect_url: str | None = typer.Option(
        None, "--connect-url", help="A Connect worker's REST API (http://host:8083)."
    ),
    name: str | None = typer.Option(None, "--connector", help="The connector's name there."),
    worker: str | None = typer.Option(
        None, "--worker-config", help="The worker's .properties: converters, consumer.*."
    ),
    bootstrap: str | None = typer.Option(
        None,
        "--bootstrap-servers",
        help="Ask this Kafka for the topics' partition counts (VERSION=offset needs one).",
    ),
    output: str | None = typer.Option(
        None, "--output", "-o", help="Write the YAML here instead of stdout."
    ),
    json_out: bool = common.JsonOpt,
) -> None:
    """Print the ES_SINK_CONFIG that makes the flow write what the connector wrote, and a
    row per option on stderr: mapped, default, no effect or not supported (exit 1)."""
    from flows.migrate.render import yaml_text
    from flows.migrate.report import UNSUPPORTED, Row
    from flows.migrate.translate import translate

    with common.errors_as_exits():
        try:
            found = _connector(source, connect_url, name, worker)
        except ConfigError as e:
            raise Usage(str(e)) from None
        partitions = None
        if bootstrap is not None:
            topics = [t.strip() for t in (found.get("topics") or "").split(",") if t.strip()]
            partitions = _partitions(bootstrap, topics)
        m = translate(found, partitions)
        text = yaml_text(m)
        for problem in check_settings(m, text):
            m.rows.append(
                Row("(the settings)", None, UNSUPPORTED, "es-sink check --offline", problem)
            )
            text = yaml_text(m)
        if json_out:
            common.emit_json(
                {
                    "connector": found.name,
                    "origin": found.origin,
                    "faithful": m.faithful,
                    "yaml": text,
                    "settings": m.settings,
                    "environment": m.environment,
                    "options": _rows_json(m.rows),
                }
            )
        else:
            if output is not None:
                Path(output).write_text(text)
                common.err.print(f"wrote {output}", highlight=False, markup=False)
            else:
                common.out.print(text, end="", highlight=False, markup=False, soft_wrap=True)
            _print_rows(m.rows)
        if not m.faithful:
            raise Problem(
                f"{len(m.unsupported())} option(s) cannot be carried over faithfully: "
                + ", ".join(r.option for r in m.unsupported()[:8])
            )


@migrate_app.command("offsets")
def offsets(
    from_group: str = typer.Option(
        ..., "--from-group", help="The connector's consumer group: connect-<name>."
    ),
    to_group: str | None = typer.Option(
        None, "--to-group", help="Copy into this group (default: KAFKA_GROUP_ID)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; change nothing."),
    probe_s: float = typer.Option(
        12.0, "--probe-s", min=0, help="Watch both groups' commits this long before copying."
    ),
    json_out: bool = common.JsonOpt,
) -> None:
    """Copy the connector's committed offsets to the flow's group (refused while the
    connector's group has members or either group's commits move)."""
    from flows.cli import migrate_offsets as copy

    with common.errors_as_exits():
        settings = common.load_settings()
        target = to_group or settings.group_id
        if target == from_group:
            raise Usage("--to-group: the same group as --from-group")
        changes = copy.plan(settings, from_group, target)
        if not dry_run:
            why = copy.refusal(settings, from_group, target, changes, probe_s)
            if why is not None:
                raise Problem(f"--from-group: refusing to copy the offsets of {from_group}: {why}")
            copy.apply(settings, from_group, target, changes)
        if json_out:
            common.emit_json(
                {
                    "from_group": from_group,
                    "to_group": target,
                    "dry_run": dry_run,
                    "auto_offset_reset": settings.auto_offset_reset,
                    "changes": [c.as_json() for c in changes],
                }
            )
            return
        verb = "would copy" if dry_run else "copied"
        for c in changes:
            where = f"{c.topic}/{c.partition}"
            if c.start == "committed":
                line = (
                    f"{verb} {where}: {from_group} {c.source} -> {target} "
                    f"(was {_dash(c.before)}; log {c.low}..{c.end}, "
                    f"{max(c.end - (c.to or 0), 0)} records left to index)"
                )
            else:
                line = f"{where}: {c.why}"
            if c.start == "committed" and c.why:
                line += f"; {c.why}"
            common.out.print(line, highlight=False, markup=False)


def _dash(value: object) -> object:
    return "-" if value is None else value


__all__ = ["check_settings", "config", "migrate_app", "offsets"]
