"""The demo talks to the stack `scripts/stack` runs, on its ports."""

from __future__ import annotations

from tests.support.paths import ROOT
from tools.demo.run import addresses


def test_the_demo_follows_the_stack_ports() -> None:
    assert addresses({}) == ("127.0.0.1:9092", "http://127.0.0.1:9200")
    assert addresses({"KAFKA_PORT": "29092", "ES_PORT": "29200"}) == (
        "127.0.0.1:29092",
        "http://127.0.0.1:29200",
    )
    named = {"KAFKA_BOOTSTRAP_SERVERS": "k:1", "ES_HOSTS": "http://e:2,http://f:3", "ES_PORT": "9"}
    assert addresses(named) == ("k:1", "http://e:2")


def test_scripts_demo_resets_only_the_stack_it_started() -> None:
    script = (ROOT / "scripts" / "demo").read_text()
    assert (
        script.index("scripts/stack up")
        < script.index("unset KAFKA_BOOTSTRAP_SERVERS ES_HOSTS")
        < script.index("-m tools.demo.run")
    )


def test_the_avro_demo_follows_the_stack_registry() -> None:
    from tools.demo.avro import registry_url

    assert registry_url({}) == "http://127.0.0.1:8081/apis/ccompat/v7"
    assert registry_url({"REGISTRY_PORT": "29081"}) == "http://127.0.0.1:29081/apis/ccompat/v7"
    assert registry_url({"SCHEMA_REGISTRY_URL": "http://sr:1", "REGISTRY_PORT": "9"}) == (
        "http://sr:1"
    )


def test_scripts_demo_starts_the_registry_for_avro_only() -> None:
    script = (ROOT / "scripts" / "demo").read_text()
    assert '*" --format avro "* | *" --format=avro "*) scripts/stack up registry' in script
    assert "unset KAFKA_BOOTSTRAP_SERVERS ES_HOSTS SCHEMA_REGISTRY_URL" in script
