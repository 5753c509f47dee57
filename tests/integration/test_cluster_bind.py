"""Which interfaces a flow process listens on.

`bytewax.run` has no TLS or authentication for the links between the processes of a
cluster: whoever reaches a cluster port talks to the cluster. So the port must be bound to
the address `-a` gives that process and nothing else, and docs/deploy.md tells how to keep
that address private (firewall rule, deploy/kubernetes/networkpolicy.yaml). These tests
start process 0 of a two-process cluster (it listens and waits for process 1) and look at
its sockets and at what a connection to its port on every other address of the host gets.
"""

from __future__ import annotations

import errno
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.support.flows import Services, create_topic, start_flow, wait_for
from tools.chaos.flow import free_ports

pytestmark = pytest.mark.integration


def _listening(pid: int) -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def _refused(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.settimeout(5)
        code = s.connect_ex((host, port))
    return code == errno.ECONNREFUSED


def _host_addresses() -> set[str]:
    """Every address of this host's interfaces (IPv4 and IPv6, link-local excluded)."""
    out = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6) and not a.address.startswith("fe80"):
                out.add(a.address.split("%")[0])
    return out


@pytest.mark.parametrize("given", ["127.0.0.1", "127.0.0.2"])
def test_the_cluster_port_is_bound_to_the_given_address_only(
    services: Services, names: Callable[[str], str], tmp_path: Path, given: str
) -> None:
    topic = names("bind")
    create_topic(services.kafka, topic)
    own, peer, api, dataflow_api = free_ports(4)
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": names("bind-group"),
        "KAFKA_STOP_AT_END": "false",
        "API_PORT": str(api),
        "BYTEWAX_DATAFLOW_API_ENABLED": "true",
        "BYTEWAX_DATAFLOW_API_PORT": str(dataflow_api),
    }
    addresses = f"{given}:{own};127.0.0.1:{peer}"
    proc = start_flow(services, env, "-i", "0", "-a", addresses, log=tmp_path / "flow.log")
    try:
        wait_for(lambda: (given, own) in _listening(proc.pid), 60, f"{given}:{own} to listen")
        wait_for(lambda: len(_listening(proc.pid)) >= 3, 30, "the API servers to listen")
        listening = _listening(proc.pid)
        # The cluster port on the given address only; the status API on API_HOST (loopback
        # by default); Bytewax's own dataflow API (BYTEWAX_DATAFLOW_API_ENABLED) on every
        # interface: bytewax.run has no setting for its address (so the network policy must
        # cover it too).
        assert listening == {(given, own), ("127.0.0.1", api), ("0.0.0.0", dataflow_api)}
        others = ({"127.0.0.1", "127.0.0.2", "127.0.0.3"} | _host_addresses()) - {given}
        assert len(others) >= 2
        for host in sorted(others):
            assert _refused(host, own), f"{host}:{own} accepted a connection"
        assert not _refused(given, own)  # the control: the given address does accept
    finally:
        proc.kill()
        proc.wait(30)


def test_the_last_process_of_a_cluster_listens_on_no_cluster_port(
    services: Services, names: Callable[[str], str], tmp_path: Path
) -> None:
    """Timely's processes connect to every lower-numbered process and accept the higher
    ones: the last process of the list has no cluster port at all."""
    topic = names("bind-last")
    create_topic(services.kafka, topic)
    first, last = free_ports(2)
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": names("bind-group"),
        "KAFKA_STOP_AT_END": "false",
    }
    log = tmp_path / "flow.log"
    addresses = f"127.0.0.1:{first};127.0.0.1:{last}"
    proc: subprocess.Popen[bytes] = start_flow(services, env, "-i", "1", "-a", addresses, log=log)
    try:
        wait_for(lambda: "error connecting to worker 0" in log.read_text(), 60, "it to dial 0")
        assert _listening(proc.pid) == set()
    finally:
        proc.kill()
        proc.wait(30)
