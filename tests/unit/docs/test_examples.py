"""The examples stay valid: the configuration file of examples/ and the README's Python
transform."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from flows.config import Settings
from flows.record import Doc, Record
from flows.transforms import apply_transforms, build_transforms
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "es-sink.yaml"
README = ROOT / "README.md"


def test_example_yaml_loads_and_its_built_in_transforms_compile():
    settings = Settings.load({"ES_SINK_CONFIG": str(EXAMPLE)})
    assert settings.topics == ("orders", "orders-eu")
    assert settings.kafka_config["client.id"] == "orders-to-es"
    assert settings.doc_id == "key"
    assert settings.on_null_value == "delete"
    # The last entry imports the user's own module, which does not exist here.
    assert settings.transforms[-1] == {"python": "mycompany.transforms:enrich"}
    assert len(build_transforms(settings.transforms[:-1])) == len(settings.transforms) - 1


def test_example_kafka_config_suits_every_client(caplog: pytest.LogCaptureFixture) -> None:
    """No client of the example's warns about its settings at start (librdkafka names a
    property it ignores, or one it does not know, in a CONFWARN line)."""
    settings = Settings.load({"ES_SINK_CONFIG": str(EXAMPLE)})
    logger = logging.getLogger("librdkafka-example")
    for kind, client in (("producer", Producer), ("admin", AdminClient)):
        conf = {**settings.librdkafka(kind), "bootstrap.servers": "127.0.0.1:1", "logger": logger}
        with caplog.at_level(logging.DEBUG, logger=logger.name):
            client(conf).poll(0.2)
    conf = settings.librdkafka("consumer", **{"group.id": "g", "logger": logger})
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        consumer = Consumer({**conf, "bootstrap.servers": "127.0.0.1:1"})
        consumer.poll(0.2)
        consumer.close()
    assert not [r.getMessage() for r in caplog.records if "CONFWARN" in r.getMessage()]


def test_the_readme_transform_does_what_the_readme_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its module, loaded through TRANSFORMS as its command line does, drops, changes and
    routes as its comments say."""
    section = README.read_text().split("\n## A Python transform\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    (command,) = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    module = tmp_path / code.splitlines()[0].removeprefix("# ")  # mycompany/transforms.py
    module.parent.mkdir(parents=True)
    (module.parent / "__init__.py").touch()
    module.write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (module.parent.name, f"{module.parent.name}.{module.stem}"):
        # Absent before and after: a later test must not import the README's module.
        monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.delitem(sys.modules, name)
    spec = re.search(r"TRANSFORMS=(\S+)", command)
    assert spec is not None
    settings = Settings.load({"TRANSFORMS": spec.group(1), "KAFKA_TOPICS": "orders"})
    transforms = build_transforms(settings.transforms)
    record = Record("orders", 0, 7, None, b"k", b"{}")
    (doc,) = apply_transforms(transforms, Doc(record, {"region": "us"}))
    assert (doc.source, doc.index) == ({"region": "us", "team": "payments"}, "orders-us")
    assert apply_transforms(transforms, Doc(record, {"status": "test"})) == []
