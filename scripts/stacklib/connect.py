"""A Kafka Connect worker's classpath (connect-runtime, connect-file and their dependencies)
from Maven Central: the tests of `es-sink migrate` run a real worker beside the broker, so
that a real `connect-<name>` consumer group with real commits exists.

Only the download lives here (`scripts/stack download connect`, run by scripts/provision);
a test starts its own worker (`tools.devkit.connect`), since a worker belongs to the test that
configures its connectors. Maven's Kafka jars hold no Connect runtime, hence a classpath of
its own, next to the broker's in the cache.
"""

from __future__ import annotations

import time
from pathlib import Path

from . import maven
from .config import CACHE_DIR, KAFKA_VERSION, log

POM = Path(__file__).resolve().parent.parent / "connect-pom.xml"
STATE_DIR = CACHE_DIR / f"kafka-connect-{KAFKA_VERSION}"
LOG_FILE = STATE_DIR / "download.log"


def libs_dir() -> Path:
    return CACHE_DIR / f"kafka-connect-{KAFKA_VERSION}" / "libs"


def download() -> Path:
    """The worker's classpath (a directory of jars), downloaded once into the cache."""
    libs = libs_dir()
    if (libs / f"connect-runtime-{KAFKA_VERSION}.jar").exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    log(f"downloading Kafka Connect {KAFKA_VERSION} from Maven Central into {libs}")
    t0 = time.monotonic()
    maven.classpath(POM, {"kafka.version": KAFKA_VERSION}, libs, "Kafka Connect")
    log(f"Kafka Connect downloaded in {time.monotonic() - t0:.1f}s ({maven.dir_mb(libs):.0f} MB)")
    return libs
