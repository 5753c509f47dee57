"""The `es-sink` operator command (console script `es-sink = "flows.cli:main"`).

Every subcommand reads the flow's settings (the environment and ES_SINK_CONFIG) and goes
through the flow's own code paths: decoding, transforms, document ids, the sink's client.
The flow runtime never imports this package (tests/unit/flows/test_layering.py). Subcommands are
imported on use, so `es-sink --help` and importing this module do no I/O.

Exit status: 0 ok, 1 problem found, 2 bad usage (also an invalid configuration, except for
`check`, for which it is the problem found).
"""

from __future__ import annotations

import typer

from flows.cli import check, control, dlq, migrate, offsets, plugins, preview, status, verify
from flows.cli import replay as replay  # registers `dlq replay` on dlq_app
from flows.runtime.version import VERSION

app = typer.Typer(
    name="es-sink",
    help="Operate an es-sink flow: check, status, dead letters, verify, offsets, stop, restart; "
    "migrate from Kafka Connect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(shown: bool) -> None:
    if shown:
        typer.echo(f"es-sink {VERSION}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass  # the options of `es-sink` itself, before any subcommand


app.command("check")(check.check)
app.command("plugins")(plugins.plugins)
app.command("status")(status.status)
app.add_typer(dlq.dlq_app, name="dlq")
app.command("verify")(verify.verify_command)
app.command("preview")(preview.preview_command)
app.add_typer(offsets.offsets_app, name="offsets")
app.command("pause")(control.pause)
app.command("resume")(control.resume)
app.command("stop")(control.stop)
app.command("restart")(control.restart)
app.add_typer(migrate.migrate_app, name="migrate")


def main() -> None:
    """The console script."""
    app()
