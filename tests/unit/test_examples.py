"""The example configuration in the README stays valid."""

from __future__ import annotations

from pathlib import Path

from flows.config import Settings
from flows.transforms import build_transforms

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "es-sink.yaml"


def test_example_yaml_loads_and_its_built_in_transforms_compile():
    settings = Settings.load({"ES_SINK_CONFIG": str(EXAMPLE)})
    assert settings.topics == ("orders", "orders-eu")
    assert settings.kafka_config["client.id"] == "orders-to-es"
    assert settings.doc_id == "key"
    assert settings.on_null_value == "delete"
    # The last entry imports the user's own module, which does not exist here.
    assert settings.transforms[-1] == {"python": "mycompany.transforms:enrich"}
    assert len(build_transforms(settings.transforms[:-1])) == len(settings.transforms) - 1
