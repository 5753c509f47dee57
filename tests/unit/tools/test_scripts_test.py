"""`scripts/test`'s ports and directories (scripts/test-env.sh): a second copy on other
ports gets directories of its own, and a second run on the same directory is refused
before it provisions, cleans or starts anything."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.support.paths import ROOT

ENV = ROOT / "scripts" / "test-env.sh"
PORTS = (
    "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "ES_PORT", "ES_TRANSPORT_PORT", "TEST_ES8_PORT",
    "TEST_ES8_TRANSPORT_PORT", "TEST_OPENSEARCH_PORT", "TEST_OPENSEARCH_TRANSPORT_PORT",
    "TEST_OPENSEARCH2_PORT", "TEST_OPENSEARCH2_TRANSPORT_PORT", "ES_SINK_TEST_FAULT_ES_PORT",
    "ES_SINK_TEST_FAULT_KAFKA_PORT", "ES_SINK_TEST_SECURE_KAFKA_PORT",
    "ES_SINK_TEST_SECURE_ES_PORT", "ES_SINK_TEST_ROLLING_ES_PORT", "ES_SINK_TEST_SOAK_ES_PORT",
    "REGISTRY_PORT", "ES_SINK_TEST_OUTAGE_REGISTRY_PORT", "ES_SINK_TEST_CONNECT_PORT",
)  # fmt: skip
SHOWN = (
    *PORTS, "STACK_DIR", "ES_SINK_TEST_STACK_DIR", "ES_SINK_TEST_KAFKA", "ES_SINK_TEST_ES",
    "ES_SINK_TEST_REGISTRY",
)  # fmt: skip


def resolved(**env: str) -> dict[str, str]:
    """What scripts/test-env.sh sets, given these variables only (no lock taken)."""
    show = "; ".join(f'echo "{name}=${name}"' for name in SHOWN)
    out = subprocess.run(
        ["bash", "-c", f". {ENV}; {show}"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_the_defaults() -> None:
    found = resolved()
    assert (found["KAFKA_PORT"], found["ES_PORT"], found["TEST_ES8_PORT"]) == (
        "19092",
        "19200",
        "19210",
    )
    assert found["STACK_DIR"] == found["ES_SINK_TEST_STACK_DIR"] == "/var/tmp/es-sink-test"
    assert found["ES_SINK_TEST_KAFKA"] == "127.0.0.1:19092"
    assert found["ES_SINK_TEST_REGISTRY"] == "http://127.0.0.1:19081"


def test_an_offset_moves_every_port_and_the_directories() -> None:
    first, second = resolved(), resolved(TEST_PORT_OFFSET="1000")
    for name in PORTS:
        assert int(second[name]) == int(first[name]) + 1000, name
    assert second["STACK_DIR"] == "/var/tmp/es-sink-test-20092"
    assert second["ES_SINK_TEST_ES"] == "http://127.0.0.1:20200"
    assert second["ES_SINK_TEST_REGISTRY"] == "http://127.0.0.1:20081"


def test_other_ports_alone_get_a_directory_of_their_own() -> None:
    found = resolved(TEST_KAFKA_PORT="29092", TEST_ES_PORT="29200", TEST_ES8_PORT="29210")
    assert (found["KAFKA_PORT"], found["ES_PORT"], found["TEST_ES8_PORT"]) == (
        "29092",
        "29200",
        "29210",
    )
    assert found["STACK_DIR"] != resolved()["STACK_DIR"]
    assert resolved(TEST_KAFKA_PORT="29092", TEST_STACK_DIR="/x")["STACK_DIR"] == "/x"


def _lock(stack_dir: Path, *, hold: bool) -> subprocess.Popen[str]:
    then = "echo locked; sleep 60" if hold else "echo locked"
    return subprocess.Popen(
        ["bash", "-c", f"set -e; . {ENV}; lock_stack_dir; {then}"],
        env={"PATH": os.environ["PATH"], "TEST_STACK_DIR": str(stack_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,  # the sleep holds the lock too: stop the whole group
    )


def test_a_second_run_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    first = _lock(tmp_path / "a", hold=True)
    try:
        assert first.stdout is not None and first.stdout.readline() == "locked\n"
        second = _lock(tmp_path / "a", hold=False)
        out, err = second.communicate(timeout=30)
        assert second.returncode == 1 and out == ""
        assert f"another run (pid {first.pid}) uses {tmp_path / 'a'}" in err
        assert "TEST_PORT_OFFSET" in err
        elsewhere = _lock(tmp_path / "b", hold=False)
        assert elsewhere.communicate(timeout=30)[0] == "locked\n"
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.communicate(timeout=30)
    again = _lock(tmp_path / "a", hold=False)
    assert again.communicate(timeout=30)[0] == "locked\n"  # free once the first run ended


def test_scripts_test_takes_the_lock_before_it_touches_anything() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    assert (
        script.index("\n. scripts/test-env.sh\n")
        < script.index("\nlock_stack_dir\n")
        < script.index("\nscripts/provision\n")
        < script.index('rm -rf "$reports"')
        < script.index("trap cleanup EXIT")
        < script.index("scripts/stack clean")
    )
