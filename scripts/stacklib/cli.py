"""scripts/stack's commands over the servers it runs, each a module with the same functions."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Protocol

from . import connect, es, kafka, registry
from .config import KAFKA_PORT, SECURE_DIR, SECURE_ENV, STACK_DIR, STACK_HOST, StackError, log
from .procs import tail
from .secure import secure


class Server(Protocol):
    """What a server module provides (kafka.py, es.py, registry.py): another kind is one more
    module."""

    STATE_DIR: Path  # its data, configuration and logs under STACK_DIR (`clean` deletes it)
    LOG_FILE: Path

    def download(self) -> Path: ...
    def up(self) -> None: ...
    def down(self) -> None: ...
    def status(self, is_secure: bool) -> bool: ...


KAFKA_ADDRESS = f"{STACK_HOST}:{KAFKA_PORT}"

# In start order; `down` stops them in reverse.
SERVERS: dict[str, Server] = {"kafka": kafka, "es": es, "registry": registry}
# What `up` starts when no server is named: the registry only on demand (`up registry`,
# `up all`), since only the avro, json-schema and protobuf formats need it.
DEFAULT = ("kafka", "es")


def chosen(which: str) -> list[Server]:
    """The servers `which` names: one, `all`, or `default` (DEFAULT)."""
    names = DEFAULT if which == "default" else SERVERS if which == "all" else (which,)
    return [server for name, server in SERVERS.items() if name in names]


# Downloaded on request only (`download connect`), never started by `up`: a test starts
# its own Kafka Connect worker (tools.devkit.connect).
DOWNLOADS = {"connect": connect.download}


def download(which: str) -> None:
    """Fetch what `up` needs into the cache, starting nothing (scripts/provision); `connect`:
    a Kafka Connect worker's classpath."""
    if which in DOWNLOADS:
        DOWNLOADS[which]()
        return
    for server in chosen(which):
        server.download()


def up(which: str) -> None:
    STACK_DIR.mkdir(parents=True, exist_ok=True)
    # Download all before starting any, so a slow first download does not race a start-up.
    download(which)
    for server in chosen(which):
        server.up()


def down(which: str) -> None:
    for server in reversed(chosen(which)):
        server.down()


def clean() -> None:
    down("all")
    for server in SERVERS.values():
        shutil.rmtree(server.STATE_DIR, ignore_errors=True)
    # Secure mode's CA, keys and passwords go with the data they protect.
    shutil.rmtree(SECURE_DIR, ignore_errors=True)
    SECURE_ENV.unlink(missing_ok=True)
    log(f"deleted the data under {STACK_DIR}")


def status(which: str) -> int:
    """`which` answers; by default Kafka, Elasticsearch, and the registry if it was started
    in this STACK_DIR (it has a pid file)."""
    is_secure = secure()
    servers = chosen(which)
    if which == "default" and registry.PID_FILE.exists():
        servers.append(registry)
    answering = [server.status(is_secure) for server in servers]
    return 0 if all(answering) else 1


def logs(which: str) -> None:
    for server in chosen(which):
        print(f"==> {server.LOG_FILE} <==\n{tail(server.LOG_FILE, 60)}")


def topic(argv: list[str]) -> None:
    """`topic create NAME [--partitions N]`: a topic on the local broker (an existing one
    is left as it is)."""
    parser = argparse.ArgumentParser(prog="stack topic")
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a topic (nothing if it exists)")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args(argv)
    if args.partitions < 1:
        parser.error("--partitions: at least 1")
    if kafka.create_topic(args.name, args.partitions):
        log(f"created topic {args.name} with {args.partitions} partition(s) on {KAFKA_ADDRESS}")
    else:
        log(f"topic {args.name} exists already on {KAFKA_ADDRESS}; left as it is")


def main(argv: list[str], usage: str) -> int:
    """`stack [up|down|status|logs|clean|download] [all|kafka|es|registry]` (`download
    connect` too), or `stack topic create
    NAME [--partitions N]`; prints `usage` on a bad command."""
    cmd = argv[1] if len(argv) > 1 else "status"
    if cmd == "topic":
        try:
            topic(argv[2:])
        except StackError as e:
            print(f"stack: error: {e}", file=sys.stderr)
            return 1
        return 0
    # No server named: `up` starts DEFAULT, `status` asks DEFAULT (and a started registry),
    # the other commands take every server.
    which = argv[2] if len(argv) > 2 else "default" if cmd in ("up", "status") else "all"
    known = which in ("all", "default") or which in SERVERS
    if not known and not (cmd == "download" and which in DOWNLOADS):
        print(usage, file=sys.stderr)
        return 2
    try:
        if cmd == "up":
            up(which)
        elif cmd == "down":
            down(which)
        elif cmd == "download":
            download(which)
        elif cmd == "clean":
            clean()
        elif cmd == "status":
            return status(which)
        elif cmd == "logs":
            logs(which)
        else:
            print(usage, file=sys.stderr)
            return 2
    except StackError as e:
        print(f"stack: error: {e}", file=sys.stderr)
        return 1
    return 0
