"""The bench's Bento system: the stream config it runs (`tools.bench.bento.config`), that a
default run leaves it out and `--systems` brings it in, and its row in the printed table."""

from __future__ import annotations

import json

import pytest

from tools.bench import bento
from tools.bench.cli import parse, variant_systems
from tools.bench.report import Row, print_table
from tools.bench.systems import UNTIL_STOPPED
from tools.bench.variants import VARIANTS


def _config() -> dict:
    return bento.config(
        bootstrap="127.0.0.1:9092,127.0.0.1:9093",
        topic="data",
        group="g1",
        es_url="http://127.0.0.1:9200",
        index="ix",
    )


def test_input_is_kafka_franz_in_a_group_from_the_oldest_offset() -> None:
    franz = _config()["input"]["kafka_franz"]
    assert franz["seed_brokers"] == ["127.0.0.1:9092", "127.0.0.1:9093"]
    assert franz["topics"] == ["data"]
    assert franz["consumer_group"] == "g1"
    assert franz["start_from_oldest"] is True
    assert "checkpoint_limit" not in franz  # its default, 1,024


def test_output_writes_the_record_key_as_id_in_batches_several_in_flight() -> None:
    es = _config()["output"]["elasticsearch"]
    assert es["urls"] == ["http://127.0.0.1:9200"]
    assert es["index"] == "ix"
    assert es["id"] == "${! @kafka_key }"
    assert es["action"] == "index"
    assert es["batching"] == {"count": 100, "period": "1s"}
    assert es["max_in_flight"] == 64
    # sniffing would send the writes to the node's own address, past a proxy
    assert es["sniff"] is False and es["healthcheck"] is False


def test_no_http_server_or_metrics_endpoint() -> None:
    cfg = _config()
    assert cfg["http"] == {"enabled": False}
    assert cfg["metrics"] == {"none": {}}


def test_config_file_is_json_hence_yaml(tmp_path) -> None:
    path = bento.write_config(tmp_path / "b.yaml", _config())
    assert json.loads(path.read_text()) == _config()


def test_a_default_run_leaves_bento_out_and_systems_brings_it_in() -> None:
    small = VARIANTS["small"]
    assert "bento" not in variant_systems(parse([]), small)
    args = parse(["--systems", "flow-1w,bento,quix,ceiling"])
    assert variant_systems(args, small) == ("ceiling", "quix", "bento", "flow-1w")
    # variants whose records are not clean JSON do not run it
    assert variant_systems(args, VARIANTS["small-dlq5"]) == ("ceiling", "flow-1w")
    assert "bento" in UNTIL_STOPPED


def test_bento_row_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    ceiling = Row("ceiling", "small", docs_per_s=40000.0, ratio_to_ceiling=1.0)
    row = Row("bento", "small", docs_per_s=20000.0, cpu_s_per_million=12.5, peak_rss_mb=80.0)
    row.ratio_to_ceiling = 0.5
    print_table([ceiling, row], {"small": None})
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("bento"))
    assert line.split()[:7] == ["bento", "small", "20,000", "0.50", "12.5", "-", "80"]
    assert row.as_json()["system"] == "bento"
