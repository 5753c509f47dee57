"""The bench variants: which records, which flow settings, which systems, which index.

Each variant runs on its own dataset topic, side by side with its own ceiling (which
indexes the same documents the flow must end up with), and reports rows of the same JSON
shape with `variant` set to its name (docs/benchmarks.md, "What runs"):

- `small`, `large`: clean JSON, ~200 B / ~2 KB, 8 partitions, every system, latency runs;
- `small-dlq5`: 5% bad records of the fuzz suite's kinds, ERRORS_TOLERANCE=all, a dead-letter
  topic per run, ON_NULL_KEY/ON_NULL_VALUE=dlq, the fuzz suite's index mapping;
- `small-transforms`: the transforms of examples/es-sink.yaml (ES_SINK_CONFIG), its
  `mycompany.transforms:enrich` replaced by `tools.bench.user_transform:enrich`;
- `small-avro`: Avro values through a Schema Registry (tests/support/schema_registry_stub.py in the
  harness process: each flow process fetches the one schema once, so the registry is off
  the per-record path; the log prints how many requests it served);
- `small-p120`: the small records over 120 partitions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.bench.services import (
    PARTITIONS,
    BodyWriter,
    Positions,
    Services,
    ceiling_body_bytes,
    produce_dataset,
)
from tools.bench.systems import OPT_IN, ROOT, SYSTEMS, log
from tools.bench.variant_data import (
    AVRO_SCHEMA,
    avro_items,
    dlq5_items,
    header_names,
    plain_items,
    transform_records,
    transformed_items,
)

__all__ = ["DEFAULT_VARIANTS", "VARIANTS", "Prepared", "Variant", "prepare"]

FLOWS = ("flow-1w", "flow-2w", "flow-2p")
BY_DEFAULT = tuple(s for s in SYSTEMS if s not in OPT_IN)
EXAMPLE = ROOT / "examples" / "es-sink.yaml"
USER_FUNCTION = "tools.bench.user_transform:enrich"


@dataclass(frozen=True)
class Variant:
    name: str
    doc_size: str
    """make_doc's shape: small (~200 B) or large (~2 KB)."""
    partitions: int = PARTITIONS
    systems: tuple[str, ...] = ("ceiling", *FLOWS)
    """The systems that can run it (loop, floor, quix and bento only read clean JSON)."""
    default_systems: tuple[str, ...] = ("ceiling", "flow-1w")
    """What runs without --systems."""
    latency: bool = False
    """Whether its latency runs are made (small and large)."""


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("small", "small", systems=SYSTEMS, default_systems=BY_DEFAULT, latency=True),
        Variant("large", "large", systems=SYSTEMS, default_systems=BY_DEFAULT, latency=True),
        Variant("small-dlq5", "small"),
        Variant("small-transforms", "small"),
        Variant("small-avro", "small"),
        Variant("small-p120", "small", partitions=120, systems=SYSTEMS),
    )
}
DEFAULT_VARIANTS = ("small",)


@dataclass
class Prepared:
    """A variant's dataset on Kafka and the settings its runs share."""

    records: int
    docs: int
    """Documents the index must hold after a run (the ceiling's too)."""
    seconds: float
    dead_letters: int = 0
    """Records each flow run must dead-letter (a dead-letter topic is made per run)."""
    flow_env: dict[str, str] = field(default_factory=dict)
    mappings: dict[str, Any] | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.closers.clear()


def example_transforms() -> list[dict[str, Any]]:
    """The `transforms:` of examples/es-sink.yaml, the user's own function (which does not
    exist here) replaced by the bench's stand-in."""
    import yaml

    entries = yaml.safe_load(EXAMPLE.read_text())["transforms"]
    out = []
    for entry in entries:
        if str(entry.get("python", "")).startswith("mycompany."):
            entry = {**entry, "python": USER_FUNCTION}
        out.append(entry)
    return out


def prepare(
    v: Variant,
    svc: Services,
    work: Path,
    topic: str,
    n: int,
    threads: int,
    with_bodies: bool,
) -> Prepared:
    """Create `topic`, produce the variant's `n` records and write the ceiling's bodies
    (`work/ceiling-<variant>.ndjson`) when `with_bodies`."""
    svc.create_topic(topic, v.partitions)
    path = work / f"ceiling-{v.name}.ndjson"
    body_bytes = ceiling_body_bytes(v.doc_size, n, threads)
    bodies = BodyWriter(path, body_bytes) if with_bodies else None
    prep = Prepared(records=n, docs=0, seconds=0.0)
    try:
        if v.name == "small-transforms":
            _prepare_transforms(prep, svc, work, topic, n, bodies)
            return prep
        items = plain_items(v.doc_size, n)
        if v.name == "small-dlq5":
            from tests.support.fuzz_inputs import MAPPING

            items = dlq5_items(n)
            prep.mappings = MAPPING
            prep.flow_env = {
                "ERRORS_TOLERANCE": "all",
                "ON_NULL_KEY": "dlq",
                "ON_NULL_VALUE": "dlq",
            }
        elif v.name == "small-avro":
            items = avro_items(n, _start_registry(prep, topic))
        prep.seconds, prep.docs = produce_dataset(svc, topic, items, n, bodies)
        if v.name == "small-dlq5":
            prep.dead_letters = n - prep.docs
        return prep
    except BaseException:
        prep.close()
        raise
    finally:
        if bodies is not None:
            bodies.close()


def _prepare_transforms(
    prep: Prepared, svc: Services, work: Path, topic: str, n: int, bodies: BodyWriter | None
) -> None:
    """Produce, then run the transforms on each record at its delivered offset (untimed)."""
    import time

    import yaml

    entries = example_transforms()
    config = work / "transforms.yaml"
    config.write_text(yaml.safe_dump({"transforms": entries}, sort_keys=False))
    prep.flow_env = {"ES_SINK_CONFIG": str(config)}
    positions = Positions(n)
    records = transform_records(n, header_names(entries))
    prep.seconds, _ = produce_dataset(svc, topic, records, n, None, positions)
    t0 = time.monotonic()
    docs = 0
    for doc_id, source in transformed_items(n, topic, entries, positions):
        docs += 1
        if bodies is not None:
            bodies.add(doc_id, source)
    prep.docs = docs
    log(
        f"small-transforms: {len(entries)} transforms of {EXAMPLE.name} applied in the harness "
        f"in {time.monotonic() - t0:.1f}s: {docs:,} documents of {n:,} records"
    )


def _start_registry(prep: Prepared, topic: str) -> int:
    """The Schema Registry stand-in, serving until the variant is done; the schema's id."""
    from tests.support.schema_registry_stub import SchemaRegistryStub

    registry = SchemaRegistryStub().start()
    stored = registry.register(f"{topic}-value", {"schema": json.dumps(AVRO_SCHEMA)})
    prep.flow_env = {"VALUE_FORMAT": "avro", "SCHEMA_REGISTRY_URL": registry.url}

    def stop() -> None:
        log(
            f"small-avro: the Schema Registry stand-in served {len(registry.requests)} "
            f"requests ({len(registry.unhandled)} unhandled) over the variant's runs"
        )
        registry.stop()

    prep.closers.append(stop)
    return stored.id
