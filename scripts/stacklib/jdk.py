"""The JDKs under /usr/lib/jvm: the newest one in a range of major versions."""

from __future__ import annotations

from pathlib import Path

JVM_DIR = Path("/usr/lib/jvm")


def newest(low: int, high: int = 999) -> str | None:
    """The home of the newest full JDK (one with `jcmd`) whose major version is in
    [low, high], or None."""
    best: tuple[int, str] | None = None
    for cand in JVM_DIR.glob("*"):
        release = cand / "release"
        if not release.exists() or not (cand / "bin" / "jcmd").exists():
            continue
        for line in release.read_text(errors="replace").splitlines():
            if line.startswith("JAVA_VERSION="):
                major = int(line.split("=", 1)[1].strip('"').split(".")[0])
                if low <= major <= high and (best is None or major > best[0]):
                    best = (major, str(cand))
    return None if best is None else best[1]
