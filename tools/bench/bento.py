"""Bento v1.20.0 (WarpStream's MIT-licensed fork of Benthos) on the same topic: the stream
config the bench and the fault comparison (`tools.chaos.compare`) run it with, and its binary.

    python -m tools.bench.bento --bootstrap HOST:PORT --es URL --topic T --group G --index I

prints the config as YAML (JSON is YAML): what `scripts/bento -c FILE` runs.

The input is `kafka_franz` (franz-go), which the v1.20.0 documentation says "often
out-performs the traditional `kafka` input", in a consumer group from the oldest offset,
with its defaults (commits every 5 s and at shutdown, 1,024 records of a partition in
flight at most). The output is `elasticsearch` with what the "Performance" section of its
documentation tunes for throughput: batches formed at the output and `max_in_flight` of
them at once (64, the default). The documentation gives no batch size; BATCH_COUNT is the
best of a sweep on this machine (200,000 small records, 2026-12-07, load ~9 on 2 cores):

| batch count | docs/s | CPU µs a record | bulks |
| ---: | ---: | ---: | ---: |
| 5,000 (the flow's bulk size) | 1,585 | 234.5 | 169 |
| 5,000, `checkpoint_limit` 5,000 | 1,968 | 245.1 | 139 |
| 1,000 | 3,797 | 98.3 | 230 |
| 500 | 5,382 | 69.2 | 426 |
| 200 | 8,138 | 48.9 | 1,015 |
| 100 | 8,874 | 44.2 | 2,014 |
| 50 | 9,350 | 43.9 | 4,013 |

Bento's CPU per record grows with the batch; from 200 down the rate is flat within the
noise, and 100 sends half the bulks of 50. A batch also goes out after BATCH_PERIOD.

The document id is the record key (`@kafka_key`), so a record written twice is the same
document, as with the flow's DOC_ID=key. `sniff` and `healthcheck` are off: sniffing would
replace the URL given (the fault comparison's proxy) by the node's own address. Everything
else keeps Bento's defaults: unlimited retries with a backoff of 1-5 s for 30 s at most per
request, and `auto_replay_nacks`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["BATCH_COUNT", "BATCH_PERIOD", "VERSION", "binary", "config", "write_config"]

VERSION = "v1.20.0"
ROOT = Path(__file__).resolve().parents[2]
BATCH_COUNT = 100
"""Actions per `_bulk` (the sweep in the module docstring)."""
BATCH_PERIOD = "1s"
MAX_IN_FLIGHT = 64
"""The output's default, which its documentation says to tune for throughput."""


def config(
    *,
    bootstrap: str,
    topic: str,
    group: str,
    es_url: str,
    index: str,
    batch_count: int = BATCH_COUNT,
    max_in_flight: int = MAX_IN_FLIGHT,
    log_level: str = "WARN",
) -> dict[str, Any]:
    """The stream config (see the module docstring); a pure function of its arguments."""
    return {
        # No HTTP server (by default 0.0.0.0:4195, shared by every run on the machine) and
        # so no metrics endpoint either.
        "http": {"enabled": False},
        "logger": {"level": log_level, "format": "logfmt", "add_timestamp": True},
        "metrics": {"none": {}},
        "input": {
            "kafka_franz": {
                "seed_brokers": bootstrap.split(","),
                "topics": [topic],
                "consumer_group": group,
                "start_from_oldest": True,
            }
        },
        "output": {
            "elasticsearch": {
                "urls": es_url.split(","),
                "index": index,
                "id": "${! @kafka_key }",
                "action": "index",
                "sniff": False,
                "healthcheck": False,
                "max_in_flight": max_in_flight,
                "batching": {"count": batch_count, "period": BATCH_PERIOD},
            }
        },
    }


def write_config(path: Path, cfg: dict[str, Any]) -> Path:
    """`cfg` as a file Bento reads (JSON is YAML)."""
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    return path


def binary(build: bool = True) -> Path:
    """The cached binary of `scripts/bento` (built now if `build` and not yet built;
    `BENTO` names another binary)."""
    flag = "--path" if build else "--cached"
    out = subprocess.run(
        [str(ROOT / "scripts" / "bento"), flag],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "BENTO_VERSION": os.environ.get("BENTO_VERSION", VERSION)},
    )
    return Path(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools.bench.bento", description="print the Bento config")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--es", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--index", required=True)
    a = p.parse_args(argv)
    cfg = config(bootstrap=a.bootstrap, topic=a.topic, group=a.group, es_url=a.es, index=a.index)
    json.dump(cfg, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
