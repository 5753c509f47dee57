"""A ConfigError that ends the process mid-flow is its one line, not a traceback
(flows.runtime.config_failure)."""

from __future__ import annotations

import sys

import pytest

from flows.errors import ConfigError
from flows.runtime import config_failure

LINE = "ES_HOSTS: http://h:9200 runs Elasticsearch 7.17.0, which the sink does not support (x)"


def bytewax_error(cause: BaseException) -> RuntimeError:
    """What Bytewax raises from `cli_main` when a sink raised `cause` (chained to it)."""
    try:
        try:
            raise cause
        except BaseException as e:
            raise RuntimeError("(src/outputs.rs:366:42): error snapshotting StatefulSink") from e
    except RuntimeError as outer:
        return outer


def test_the_config_error_behind_bytewax_error_is_found() -> None:
    error = ConfigError(LINE)
    assert config_failure.cause(bytewax_error(error)) is error
    assert config_failure.cause(error) is error
    assert config_failure.cause(bytewax_error(ValueError("x"))) is None
    assert config_failure.cause(None) is None


def test_an_error_raised_from_none_keeps_its_own_traceback() -> None:
    try:
        try:
            raise ConfigError(LINE)
        except ConfigError:
            raise ValueError("unrelated") from None
    except ValueError as e:
        assert config_failure.cause(e) is None


def test_the_hook_prints_the_line_and_leaves_other_errors_to_the_previous_hook(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, error, tb: seen.append(error))
    config_failure.install()
    refused = bytewax_error(ConfigError(LINE))
    sys.excepthook(RuntimeError, refused, refused.__traceback__)
    other = bytewax_error(ValueError("boom"))
    sys.excepthook(RuntimeError, other, other.__traceback__)
    assert seen == [other]  # its traceback, as before
    assert capsys.readouterr().err == f"es_sink: configuration error: {LINE}\n"
