"""The Schema Registry: Apicurio Registry from Maven Central (a Quarkus fast-jar), serving
the Confluent Schema Registry API at /apis/ccompat/v7, on embedded H2 files in STACK_DIR.

The tarball is unpacked once into the cache and run from there; what a registry writes
(its H2 database and log) stays in STACK_DIR/registry, so schemas survive `down` and `up`
(a registry stopped and started again serves the same ids) and `clean` deletes them.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import jdk, maven
from .config import (
    CACHE_DIR,
    REGISTRY_DIR,
    REGISTRY_HEAP,
    REGISTRY_PORT,
    REGISTRY_VERSION,
    STACK_HOST,
    StackError,
    log,
)
from .procs import check_ports, pid_alive, spawn, stop, wait_until

STATE_DIR = REGISTRY_DIR
PID_FILE = REGISTRY_DIR / "registry.pid"
LOG_FILE = REGISTRY_DIR / "registry.log"
NAME = "Schema Registry"
API = "/apis/ccompat/v7"
"""The Confluent-compatible API: what SCHEMA_REGISTRY_URL names, after the address."""
MIN_JAVA = 21  # its classes are Java 21 bytecode


def url() -> str:
    """What SCHEMA_REGISTRY_URL is set to for this registry."""
    return f"http://{STACK_HOST}:{REGISTRY_PORT}{API}"


def java() -> str:
    """`java` of REGISTRY_JAVA_HOME, else of the newest JDK >= 21 under /usr/lib/jvm."""
    home = os.environ.get("REGISTRY_JAVA_HOME") or jdk.newest(MIN_JAVA)
    if not home:
        raise StackError(
            f"no JDK {MIN_JAVA}+ found under /usr/lib/jvm: Apicurio Registry "
            f"{REGISTRY_VERSION} needs one; set REGISTRY_JAVA_HOME"
        )
    path = Path(home) / "bin" / "java"
    if not path.exists():
        raise StackError(f"REGISTRY_JAVA_HOME={home} has no bin/java")
    return str(path)


def download() -> Path:
    """The unpacked application (quarkus-run.jar and its lib/), once, in the cache.

    Maven checks the tarball against Central's .sha1 (`--strict-checksums`); it is deleted
    once unpacked (Maven's local repository keeps its own copy).
    """
    home = CACHE_DIR / f"apicurio-registry-{REGISTRY_VERSION}"
    if (home / "quarkus-run.jar").exists():
        return home
    archive = maven.artifact(
        f"io.apicurio:apicurio-registry-app:{REGISTRY_VERSION}:tar.gz:all",
        CACHE_DIR / f"apicurio-registry-app-{REGISTRY_VERSION}-all.tar.gz",
        NAME,
        f"Apicurio Registry {REGISTRY_VERSION}",
    )
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(partial, filter="data")
    if not (partial / "quarkus-run.jar").exists():
        raise StackError(f"{archive} has no quarkus-run.jar at its top")
    partial.rename(home)
    archive.unlink()
    log(f"{NAME} unpacked into {home} ({maven.dir_mb(home):.0f} MB)")
    return home


def answers(timeout: float = 3) -> bool:
    """Whether the Confluent-compatible API lists subjects."""
    try:
        with urllib.request.urlopen(f"{url()}/subjects", timeout=timeout) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def up() -> None:
    if pid_alive(PID_FILE):
        log(f"{NAME} already running at {url()}")
        return
    check_ports(NAME, {"REGISTRY_PORT": REGISTRY_PORT})
    java_bin = java()
    home = download()
    data = REGISTRY_DIR / "data"
    data.mkdir(parents=True, exist_ok=True)
    cmd = [
        java_bin,
        f"-Xmx{REGISTRY_HEAP}",
        "-Xms64m",
        # One core's worth of start-up work, little memory: a test server, not a busy one.
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:+ExitOnOutOfMemoryError",
        f"-Djava.io.tmpdir={data}",
        f"-Dquarkus.http.host={STACK_HOST}",
        f"-Dquarkus.http.port={REGISTRY_PORT}",
        # The health and metrics interface is built in (on 0.0.0.0:9000 by default): on
        # loopback, on a port of the system's choosing, so that registries never collide.
        "-Dquarkus.management.host=127.0.0.1",
        "-Dquarkus.management.port=0",
        "-Dquarkus.http.access-log.enabled=false",
        # H2 on files instead of in memory: the schemas outlive a restart.
        f"-Dapicurio.datasource.url=jdbc:h2:file:{data / 'registry'}",
        "-jar",
        str(home / "quarkus-run.jar"),
    ]
    LOG_FILE.write_bytes(b"")
    t0 = time.monotonic()
    proc = spawn(cmd, LOG_FILE, PID_FILE, dict(os.environ))
    wait_until(NAME, proc, PID_FILE, LOG_FILE, answers)
    took = time.monotonic() - t0
    log(f"{NAME} (Apicurio {REGISTRY_VERSION}) up at {url()} in {took:.1f}s")


def down() -> None:
    stop(NAME, PID_FILE)


def status(is_secure: bool) -> bool:
    """Log whether the registry runs and answers (plain HTTP, also in secure mode)."""
    pid = pid_alive(PID_FILE)
    if pid and answers():
        log(f"{NAME} (Apicurio {REGISTRY_VERSION}): running (pid {pid}) at {url()}, log {LOG_FILE}")
        return True
    if pid:
        log(f"{NAME}: process {pid} alive but not answering at {url()}")
    else:
        log(f"{NAME}: not running")
    return False
