"""A Kafka Connect worker for tests: standalone mode, on the jars `scripts/provision`
caches (`scripts/stack download connect`), its REST API on 127.0.0.1.

A sink connector's offsets live in its Kafka consumer group (`connect-<name>`) in standalone
mode as in distributed mode, so a standalone worker running the FileStreamSink connector
over a topic gives a real group with real commits, which `es-sink migrate offsets` moves.
Nothing here downloads: without the cached jars the test fails and says how to get them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

KAFKA_VERSION = os.environ.get("KAFKA_VERSION", "4.1.1")
CACHE = Path(os.environ.get("STACK_CACHE_DIR", Path.home() / ".cache" / "es-sink")).expanduser()
LIBS = CACHE / f"kafka-connect-{KAFKA_VERSION}" / "libs"
LOG4J = """rootLogger.level=INFO
rootLogger.appenderRef.file.ref=FILE
appender.file.type=File
appender.file.name=FILE
appender.file.fileName={log}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
"""


class ConnectError(AssertionError):
    """The worker did not start, or its REST API refused a request."""


class Worker:
    """One standalone Connect worker: `start()`, REST calls, `close()`."""

    def __init__(self, bootstrap: str, port: int, workdir: Path, flush_ms: int = 1000) -> None:
        self.bootstrap = bootstrap
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.workdir = workdir
        self.flush_ms = flush_ms
        self.log = workdir / "connect-worker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> float:
        """Start the worker and wait until its REST API answers; returns the seconds it took."""
        if not (LIBS / f"connect-runtime-{KAFKA_VERSION}.jar").exists():
            raise ConnectError(
                f"no Kafka Connect jars in {LIBS}: run scripts/provision (or scripts/stack "
                "download connect) first"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / "worker.properties"
        props.write_text(
            "\n".join(
                [
                    f"bootstrap.servers={self.bootstrap}",
                    "key.converter=org.apache.kafka.connect.storage.StringConverter",
                    "value.converter=org.apache.kafka.connect.storage.StringConverter",
                    f"offset.storage.file.filename={self.workdir / 'source-offsets'}",
                    f"offset.flush.interval.ms={self.flush_ms}",
                    f"listeners=http://127.0.0.1:{self.port}",
                    "rest.advertised.host.name=127.0.0.1",
                    # the ServiceLoader manifests of the jars, no class scan: a faster start
                    "plugin.discovery=service_load",
                    "",
                ]
            )
        )
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(LOG4J.format(log=self.log))
        cmd = [
            "java",
            "-Xms128m",
            "-Xmx384m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{LIBS}/*",
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(props),
        ]
        started = time.monotonic()
        with open(self.workdir / "connect-worker.out", "ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConnectError(f"the Connect worker exited with {self.proc.returncode}; "
                                   f"see {self.log}")  # fmt: skip
            try:
                self.request("GET", "/")
                return time.monotonic() - started
            except (ConnectError, OSError):
                time.sleep(0.25)
        self.close()
        raise ConnectError(
            f"the Connect worker did not answer within {timeout:.0f}s; see {self.log}"
        )

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """A REST call; its JSON answer (None when empty). ConnectError on HTTP >= 400."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 (our worker)
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise ConnectError(f"{method} {path}: HTTP {e.code} {e.read()[:500]!r}") from None
        except urllib.error.URLError as e:
            raise ConnectError(f"{method} {path}: {e.reason}") from None
        return json.loads(raw) if raw.strip() else None

    def create(self, name: str, config: dict[str, str]) -> None:
        self.request("POST", "/connectors", {"name": name, "config": config})

    def state(self, name: str) -> tuple[str, list[str]]:
        """The connector's state and its tasks' states."""
        status = self.request("GET", f"/connectors/{name}/status")
        return status["connector"]["state"], [t["state"] for t in status.get("tasks", [])]

    def wait_state(self, name: str, wanted: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                connector, tasks = self.state(name)
            except ConnectError:
                connector, tasks = "UNKNOWN", []
            tasks_ok = wanted == "STOPPED" or (tasks and all(t == wanted for t in tasks))
            if connector == wanted and tasks_ok:
                return
            if time.monotonic() > deadline:
                raise ConnectError(f"connector {name} is {connector} {tasks}, not {wanted}")
            time.sleep(0.2)

    def pause(self, name: str) -> None:
        self.request("PUT", f"/connectors/{name}/pause")
        self.wait_state(name, "PAUSED")

    def stop_connector(self, name: str) -> None:
        """PUT /connectors/<name>/stop: its tasks stop and leave the group (KIP-875)."""
        self.request("PUT", f"/connectors/{name}/stop")
        self.wait_state(name, "STOPPED")

    def resume(self, name: str) -> None:
        self.request("PUT", f"/connectors/{name}/resume")
        self.wait_state(name, "RUNNING")

    def delete(self, name: str) -> None:
        self.request("DELETE", f"/connectors/{name}")

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
