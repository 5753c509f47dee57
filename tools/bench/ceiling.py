"""The ceiling: raw Elasticsearch `_bulk` ingest, no Kafka (run as its own process).

    python -m tools.bench.ceiling bulk  --es URL --index I --bodies FILE [--threads 3]
    python -m tools.bench.ceiling paced --es URL --index I --variant small --rate R --seconds S

`bulk` sends the pre-serialized NDJSON bodies that the harness wrote (index actions with
the dataset's ids, ~5 MB each; FILE.json lists their offsets) straight to `POST
/<index>/_bulk` from a thread pool, `--threads` requests in flight. Items rejected with 429
(or another retryable status) are re-sent alone, so no document is indexed twice.

`paced` is the ceiling's latency run: it makes latency documents on the schedule the
harness's Kafka producer uses (document `seq` is due at start + seq/rate), stamps each with
`lat_ts` (epoch ms when it was made, as the record timestamp is for Kafka), and sends what
is due every 10 ms as one `_bulk`. It prints `T0 <epoch seconds>` when it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from elasticsearch import Elasticsearch

from sinks.elasticsearch.client import connect
from tools.bench.data import LatencyDocs, due_time_ms, lat_key_for

RETRY_STATUSES = {429, 502, 503, 504}


def send(es: Elasticsearch, index: str, body: bytes) -> None:
    """One `_bulk`; re-send only the items that failed transiently; raise on other errors."""
    for attempt in range(20):
        resp = es.bulk(index=index, operations=body, filter_path="errors,items.*.status")
        if not resp.get("errors"):
            return
        lines = body.split(b"\n")
        retry: list[bytes] = []
        for i, item in enumerate(resp["items"]):
            (result,) = item.values()
            status = result["status"]
            if status < 300:
                continue
            if status not in RETRY_STATUSES:
                raise RuntimeError(f"ceiling: item refused with HTTP {status}")
            retry += [lines[2 * i], lines[2 * i + 1]]
        body = b"\n".join(retry) + b"\n"
        time.sleep(min(0.05 * 2**attempt, 2))
    raise RuntimeError("ceiling: items still rejected after 20 attempts")


def bulk(args: argparse.Namespace) -> None:
    with open(args.bodies + ".json", "rb") as f:
        chunks = json.load(f)  # [[offset, length], ...]
    if args.limit:
        chunks = chunks[: args.limit]
    es = connect(args.es, request_timeout=120)
    fd = os.open(args.bodies, os.O_RDONLY)

    def one(chunk: list[int]) -> None:
        offset, length = chunk
        send(es, args.index, os.pread(fd, length, offset))

    with ThreadPoolExecutor(args.threads) as pool:
        for _ in pool.map(one, chunks):
            pass
    os.close(fd)


def paced(args: argparse.Namespace) -> None:
    es = connect(args.es, request_timeout=120)
    docs = LatencyDocs(args.variant)
    t0 = time.time()
    print(f"T0 {t0:.6f}", flush=True)
    total = int(args.rate * args.seconds)
    seq = 0
    while seq < total:
        due = min(total, int((time.time() - t0) * args.rate) + 1)
        if due > seq:
            parts: list[bytes] = []
            while seq < due:
                parts.append(b'{"index":{"_id":"%s"}}\n' % lat_key_for(seq).encode())
                parts.append(docs.value(seq, due_time_ms(t0, args.rate, seq)) + b"\n")
                seq += 1
            send(es, args.index, b"".join(parts))
        time.sleep(max(0.0, 0.01 - (time.time() - t0) % 0.01))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="tools.bench.ceiling")
    p.add_argument("mode", choices=["bulk", "paced"])
    p.add_argument("--es", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--bodies")
    p.add_argument("--threads", type=int, default=3)
    p.add_argument("--limit", type=int, default=0, help="bulk: send only the first N bodies")
    p.add_argument("--variant", default="small")
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--seconds", type=float, default=10)
    args = p.parse_args(argv)
    if args.mode == "bulk":
        bulk(args)
    else:
        paced(args)


if __name__ == "__main__":
    sys.exit(main())
