"""The pure parts of `scripts/hosts` (tools.chaos.hosts*): no root, no network, no namespaces."""

from __future__ import annotations

from pathlib import Path

from tools.chaos import hosts_net as net
from tools.chaos.audit import AuditResult
from tools.chaos.hosts import Outcome, parse_args
from tools.chaos.hosts_cluster import move_partitions, why


def test_hosts_have_distinct_addresses_and_short_link_names() -> None:
    addresses = {h.address for h in net.ALL}
    assert addresses == {"10.77.0.11", "10.77.0.12", "10.77.0.13"}
    assert net.MACHINE not in addresses
    for h in net.ALL:
        assert h.netns.startswith(net.PREFIX) and h.veth.startswith(net.PREFIX)
        assert len(h.veth) <= 15 and len(f"{h.veth[:-2]}-n") <= 15  # IFNAMSIZ - 1


def test_setup_commands_build_the_bridge_first_and_every_host_on_it() -> None:
    cmds = net.setup_commands()
    assert cmds[0] == [net.IP, "link", "add", net.BRIDGE, "type", "bridge"]
    flat = [" ".join(c) for c in cmds]
    for h in net.ALL:
        assert f"{net.IP} netns add {h.netns}" in flat
        assert f"{net.IP} link set {h.veth} master {net.BRIDGE}" in flat
        assert any(f.endswith(f"addr add {h.address}/24 dev eth0") for f in flat)
        assert flat.index(f"{net.IP} netns add {h.netns}") < flat.index(
            f"{net.IP} link set {h.veth} master {net.BRIDGE}"
        )
    assert all(c[0] == net.IP for c in cmds)


def test_why_prefers_the_watchdog_line_over_a_panic(tmp_path: Path) -> None:
    log = tmp_path / "p.log"
    log.write_text(
        "INFO start\n"
        "ERROR flows.api.watchdog: cluster stalled: no epoch closed for 16s ...\n"
        "pyo3_runtime.PanicException: Send thread panic: Any { .. }\n"
    )
    assert why(log).startswith("cluster stalled: no epoch closed for 16s")
    log.write_text("x\npyo3_runtime.PanicException: Send thread panic: Any { .. }\nFATAL\n")
    assert why(log) == "PanicException: Send thread panic: Any { .. }"
    assert why(tmp_path / "missing.log") == ""


def test_move_partitions_moves_every_file_of_a_partition(tmp_path: Path) -> None:
    src, dst = tmp_path / "c", tmp_path / "a"
    src.mkdir()
    dst.mkdir()
    for name in ("part-2.sqlite3", "part-2.sqlite3-wal", "part-2.sqlite3-shm"):
        (src / name).write_text(name)
    (dst / "part-0.sqlite3").write_text("0")
    assert move_partitions(src, dst) == [
        "part-2.sqlite3",
        "part-2.sqlite3-shm",
        "part-2.sqlite3-wal",
    ]
    assert sorted(p.name for p in dst.iterdir())[0] == "part-0.sqlite3"
    assert not list(src.iterdir())


def test_outcome_passes_only_audited_drained_and_cleanly_stopped() -> None:
    out = Outcome("cut", audit=AuditResult(), drained=True, final_codes=[0, 0, 0])
    assert out.passed
    assert "scenario=cut records=10 lost=0" in out.line(10, 1.0)
    assert not Outcome("cut", audit=AuditResult(lost=1), drained=True).passed
    assert not Outcome("cut", audit=AuditResult(), drained=True, hung=1).passed
    assert not Outcome("cut", audit=AuditResult(), drained=True, final_codes=[0, 1]).passed
    assert not Outcome("cut", audit=None, drained=True).passed
    blip = Outcome("blip", audit=AuditResult(), drained=True, final_codes=[0], survived=False)
    assert not blip.passed  # a blip shorter than CLUSTER_STALL_S must not end the cluster
    assert "survived=false" in blip.line(1, 1.0)


def test_parse_args_defaults_to_every_scenario() -> None:
    args = parse_args([])
    assert args.scenarios == ["cut", "kill", "term", "int", "gone", "blip"]
    assert parse_args(["--scenarios", "int,cut"]).scenarios == ["int", "cut"]
