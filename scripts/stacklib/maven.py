"""Downloads from Maven Central through `mvn`, into the cache shared by every STACK_DIR."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from .config import CACHE_DIR, StackError, log
from .procs import run_quiet

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def mvn() -> str:
    path = shutil.which("mvn")
    if not path:
        raise StackError(
            "no 'mvn' on PATH: it downloads Kafka and Elasticsearch (apt-get install maven)"
        )
    return path


def classpath(pom: Path, properties: dict[str, str], libs: Path, what: str) -> None:
    """Copy the runtime dependencies of `pom` (one jar each) into the directory `libs`.

    They land in a temporary directory renamed when complete: an interrupted download is
    retried, never used.
    """
    tmp = libs.with_name("libs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    run_quiet(
        [
            mvn(),
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            *(f"-D{key}={value}" for key, value in properties.items()),
            f"-DoutputDirectory={tmp}",
        ],
        f"{what} download (mvn)",
    )
    tmp.rename(libs)


def artifact(coordinates: str, dest: Path, what: str, label: str) -> Path:
    """`dest` in the cache: the artifact `group:name:version:type`, downloaded once.

    `label` names it in the progress line ("Elasticsearch 9.5.4 (integ-test-zip)").
    """
    if dest.exists():
        return dest
    log(f"downloading {label} from Maven Central")
    t0 = time.monotonic()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    run_quiet(
        [
            mvn(),
            "-B",
            "-q",
            # A download whose .sha1 (from the repository) does not match fails.
            "--strict-checksums",
            f"{DEPENDENCY_PLUGIN}:copy",
            f"-Dartifact={coordinates}",
            f"-DoutputDirectory={CACHE_DIR}",
        ],
        f"{what} download (mvn)",
    )
    log(f"{what} downloaded in {time.monotonic() - t0:.1f}s ({dest.stat().st_size / 1e6:.0f} MB)")
    return dest


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6
