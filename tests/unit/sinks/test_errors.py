"""sinks.errors: every error the pipeline raises on purpose pickles (Bytewax moves them
between processes), with its data and message."""

from __future__ import annotations

import pickle

import pytest

from sinks.errors import (
    ConfigError,
    DeadLetterDeliveryError,
    DeadLetterLimitError,
    ElasticsearchUnavailableError,
    RecordFailedError,
)


def test_record_failed_error_pickles() -> None:
    e = RecordFailedError("orders/3@42", "index", "elasticsearch.mapper_parsing_exception: x")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is RecordFailedError
    assert str(back) == str(e)
    assert (back.where, back.stage, back.reason) == (e.where, e.stage, e.reason)


@pytest.mark.parametrize(
    "cls",
    [ConfigError, DeadLetterLimitError, DeadLetterDeliveryError, ElasticsearchUnavailableError],
)
def test_other_errors_pickle(cls: type[Exception]) -> None:
    back = pickle.loads(pickle.dumps(cls("NAME: something")))
    assert type(back) is cls
    assert str(back) == "NAME: something"
