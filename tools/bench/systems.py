"""The systems under test and how each one is started and stopped.

Each system runs on its own, one after another, as its own process(es), into its own fresh
index:

- ceiling: pre-serialized NDJSON `_bulk` bodies (~5 MB, the same ids), 3 requests in flight,
  no Kafka (`tools.bench.ceiling`);
- loop: confluent-kafka consumer + `helpers.streaming_bulk`, commit after each bulk
  (`tools.bench.loop`);
- floor: the least per record, no guarantees (`tools.bench.loop --floor`);
- quix: Quix Streams' ElasticsearchSink (`tools/bench/quix_app.py`, in the tools virtualenv);
- bento: Bento v1.20.0's kafka_franz input and elasticsearch output (`tools.bench.bento`, the
  binary of `scripts/bento`);
- flow-1w, flow-2w, flow-2p: `python -m bytewax.run flows.es_sink` with 1 worker, 2 workers,
  2 processes; KAFKA_STOP_AT_END=true, fresh group ids.

Every child runs from a copy of the sources taken at the start of the run
(`snapshot_sources`), so each figure comes from the same code.
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import os
import shutil
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.bench import bento
from tools.bench.procs import Proc, ServerCpu
from tools.bench.services import Services

__all__ = [
    "OPT_IN",
    "ROOT",
    "SYSTEMS",
    "UNTIL_STOPPED",
    "Ctx",
    "child_env",
    "launch",
    "launch_ceiling_bulk",
    "log",
    "snapshot_sources",
    "stop_all",
    "tools_python",
]

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ("ceiling", "loop", "floor", "quix", "bento", "flow-1w", "flow-2w", "flow-2p")
UNTIL_STOPPED = ("quix", "bento")
"""Systems with no stop at the end of a backlog: stopped by SIGTERM (flush, commit) once
every document is in."""
OPT_IN = ("bento",)
"""Systems that run only when --systems names them: Bento is a Go build of minutes the
first time (scripts/bento), which a default run does not pay for."""
TOOLS_PINS = ("quixstreams[elasticsearch]==3.28.1", "py-spy==0.4.3")


def log(msg: str) -> None:
    print(f"bench {datetime.datetime.now():%H:%M:%S} {msg}", file=sys.stderr, flush=True)


@dataclass
class Ctx:
    """What every run of one bench invocation shares."""

    svc: Services
    args: argparse.Namespace
    work: Path
    variant: str
    """The variant's name (tools.bench.variants), in index names and the rows."""
    n: int
    """Records on the dataset topic."""
    data_topic: str
    bodies: Path
    tools_python: Path | None
    servers: ServerCpu | None = None
    bento: Path | None = None
    """The Bento binary (when a variant runs `bento`)."""
    doc_size: str = "small"
    """make_doc's shape (small, large): the latency runs' records."""
    docs: int = 0
    """Documents the index must hold after a run (0: n)."""
    systems: tuple[str, ...] = ()
    """The systems this variant runs (empty: --systems)."""
    flow_env: dict[str, str] = field(default_factory=dict)
    """The variant's settings for the flow runs (--flow-env is applied after them)."""
    mappings: dict[str, Any] | None = None
    """The variant's index mapping (None: dynamic)."""
    dead_letters: int = 0
    """Records a flow run must dead-letter (a dead-letter topic is made per run)."""

    @property
    def expected_docs(self) -> int:
        return self.docs or self.n

    @property
    def run_systems(self) -> tuple[str, ...]:
        return self.systems or tuple(self.args.systems)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_SRC: list[Path] = [ROOT]


def snapshot_sources(work: Path) -> Path:
    """Copy flows/, sinks/ and tools/bench/ into the work directory and run every child from
    there: other people may edit the working tree during a run, and each figure must come
    from the same code."""
    src = work / "src"
    for pkg in ("flows", "sinks", "tools/bench"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "tools" / "__init__.py", src / "tools" / "__init__.py")
    # Compiled once, as an installed app or the Docker image is: else every system's first
    # process compiles the ~14,000 lines it imports (~0.1 s of CPU) into its figures.
    compileall.compile_dir(src, quiet=1)
    _SRC[0] = src
    # The harness imports flows/ itself too (tools.bench.variants runs the transforms to make the
    # ceiling's documents): from the same copy.
    sys.path.insert(0, str(src))
    return src


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAFKA_", "ES_", "DLQ_", "BYTEWAX_", "PYTHON"))
    }
    env["PYTHONPATH"] = str(_SRC[0])
    env.update(extra or {})
    return env


def launch(
    ctx: Ctx,
    system: str,
    topic: str,
    index: str,
    group: str,
    live: bool,
    tag: str,
    env: dict[str, str] | None = None,
) -> list[Proc]:
    """Start `system` reading `topic` into `index`; `live`: run until stopped (latency);
    `env`: more settings for a flow (after the variant's, before --flow-env)."""
    svc, py = ctx.svc, sys.executable
    logf = ctx.work / f"{ctx.variant}-{tag}-{system}.log"
    if system in ("loop", "floor"):
        cmd = [py, "-m", "tools.bench.loop", "--bootstrap", svc.bootstrap, "--es", svc.es_url]
        cmd += ["--topic", topic, "--group", group, "--index", index]
        if not live:
            cmd.append("--stop-at-end")
        if system == "floor":
            cmd.append("--floor")
        return [Proc(system, cmd, child_env(), ctx.work, logf)]
    if system == "quix":
        assert ctx.tools_python is not None
        state = ctx.work / f"quix-state-{ctx.variant}-{tag}"
        cmd = [str(ctx.tools_python), str(_SRC[0] / "tools" / "bench" / "quix_app.py")]
        cmd += ["--bootstrap", svc.bootstrap, "--es", svc.es_url, "--topic", topic]
        cmd += ["--group", group, "--index", index, "--state-dir", str(state)]
        return [Proc(system, cmd, child_env(), ctx.work, logf)]
    if system == "bento":
        assert ctx.bento is not None
        cfg = bento.config(
            bootstrap=svc.bootstrap, topic=topic, group=group, es_url=svc.es_url, index=index
        )
        path = bento.write_config(ctx.work / f"bento-{ctx.variant}-{tag}.yaml", cfg)
        return [Proc(system, [str(ctx.bento), "-c", str(path)], child_env(), ctx.work, logf)]
    if system.startswith("flow-"):
        env = child_env(
            {
                "KAFKA_BOOTSTRAP_SERVERS": svc.bootstrap,
                "KAFKA_TOPICS": topic,
                "KAFKA_GROUP_ID": group,
                "KAFKA_AUTO_OFFSET_RESET": "earliest",
                "KAFKA_STOP_AT_END": "false" if live else "true",
                "ES_HOSTS": svc.es_url,
                "ES_INDEX": index,
                **ctx.flow_env,
                **(env or {}),
                **dict(kv.split("=", 1) for kv in ctx.args.flow_env),
            }
        )
        base = [py, "-m", "bytewax.run", "flows.es_sink"]
        if ctx.args.epoch_s:
            base += ["-s", str(ctx.args.epoch_s)]
        if system == "flow-1w":
            return [Proc(system, base, env, ctx.work, logf)]
        if system == "flow-2w":
            return [Proc(system, [*base, "-w", "2"], env, ctx.work, logf)]
        addrs = f"127.0.0.1:{free_port()};127.0.0.1:{free_port()}"
        return [
            Proc(
                f"{system}/{i}",
                [*base, "-i", str(i), "-a", addrs],
                env,
                ctx.work,
                ctx.work / f"{ctx.variant}-{tag}-{system}-{i}.log",
            )
            for i in range(2)
        ]
    raise ValueError(system)


def launch_ceiling_bulk(ctx: Ctx, index: str, limit: int = 0) -> list[Proc]:
    cmd = [sys.executable, "-m", "tools.bench.ceiling", "bulk", "--es", ctx.svc.es_url]
    cmd += ["--index", index, "--bodies", str(ctx.bodies), "--threads", str(ctx.args.threads)]
    cmd += ["--limit", str(limit)]
    return [
        Proc("ceiling", cmd, child_env(), ctx.work, ctx.work / f"{ctx.variant}-tput-ceiling.log")
    ]


def stop_all(procs: list[Proc], natural: bool, grace: float, term_grace: float = 60) -> None:
    """Let processes end by themselves (`natural`) for up to `grace` s; then SIGTERM all of
    them at once (a multi-process flow only stops when every process was told), and SIGKILL
    what is still running `term_grace` s later."""
    if natural:
        deadline = time.monotonic() + grace
        for p in procs:
            p.wait(max(0.0, deadline - time.monotonic()))
    alive = [p for p in procs if not p.poll()]
    for p in alive:
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + term_grace
    for p in alive:
        if not p.wait(max(0.0, deadline - time.monotonic())):
            p.stop(0)


def tools_python(args: argparse.Namespace) -> Path:
    """The bench tools virtualenv (quixstreams, py-spy), created on first use."""
    venv = Path(args.tools_venv).expanduser()
    py = venv / "bin" / "python"
    stamp = venv / (".bench-" + uuid.uuid5(uuid.NAMESPACE_URL, " ".join(TOOLS_PINS)).hex[:12])
    if not stamp.exists():
        import subprocess

        log(f"creating the tools virtualenv {venv} ({', '.join(TOOLS_PINS)})")
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *TOOLS_PINS],
            check=True,
        )
        stamp.touch()
    return py
