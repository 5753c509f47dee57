"""The bench runs every system from a copy of the code taken at its start
(`tools.bench.systems.snapshot_sources`): the copy must hold what the children import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools.bench import systems


def test_the_children_import_the_flow_and_the_bench_from_the_copy(tmp_path: Path) -> None:
    saved_src, saved_path = list(systems._SRC), list(sys.path)
    try:
        src = systems.snapshot_sources(tmp_path)
        env = systems.child_env()
    finally:
        systems._SRC[:] = saved_src
        sys.path[:] = saved_path
    code = (
        "import flows.pipeline, tools.bench.loop, tools.bench.ceiling, tools.bench.user_transform"
        ", sinks; print(flows.__file__)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith(str(src))
    assert (src / "tools" / "bench" / "quix_app.py").is_file()
