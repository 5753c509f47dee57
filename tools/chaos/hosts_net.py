"""Three "hosts" on this machine for `scripts/hosts`: network namespaces on one bridge.

    esk-br0 (10.77.0.1/24, the machine: Kafka, Elasticsearch, the harness)
      ├─ esk-a-h ══ veth ══ eth0 10.77.0.11 in namespace esk-a
      ├─ esk-b-h ══ veth ══ eth0 10.77.0.12 in namespace esk-b
      └─ esk-c-h ══ veth ══ eth0 10.77.0.13 in namespace esk-c

Cutting a host's link is `ip link set esk-<h>-h down` on the machine's side: that host
then reaches neither its peers nor Kafka nor Elasticsearch, and nobody sees a FIN or RST
(exactly a cable pulled or a partitioned network). Needs root (CAP_NET_ADMIN). Everything
is named `esk-*`, so `teardown()` finds what a crashed run left behind.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

IP = "/usr/sbin/ip"
BRIDGE = "esk-br0"
PREFIX = "esk-"
SUBNET = "10.77.0"
MACHINE = f"{SUBNET}.1"
HOSTS = ("a", "b", "c")


@dataclass(frozen=True)
class Host:
    name: str  # a, b, c

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        """The machine's end of the host's link (on the bridge): what a cut takes down."""
        return f"{PREFIX}{self.name}-h"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{11 + HOSTS.index(self.name)}"

    def exec_prefix(self) -> list[str]:
        """Run a command on this host."""
        return [IP, "netns", "exec", self.netns]


ALL = tuple(Host(h) for h in HOSTS)


def setup_commands(hosts: tuple[Host, ...] = ALL) -> list[list[str]]:
    """The `ip` commands that build the bridge and the hosts (pure: unit-tested)."""
    cmds = [
        [IP, "link", "add", BRIDGE, "type", "bridge"],
        [IP, "addr", "add", f"{MACHINE}/24", "dev", BRIDGE],
        [IP, "link", "set", BRIDGE, "up"],
    ]
    for h in hosts:
        inner = f"{h.veth[:-2]}-n"
        cmds += [
            [IP, "netns", "add", h.netns],
            [IP, "link", "add", h.veth, "type", "veth", "peer", "name", inner],
            [IP, "link", "set", inner, "netns", h.netns],
            [IP, "link", "set", h.veth, "master", BRIDGE],
            [IP, "link", "set", h.veth, "up"],
            [*h.exec_prefix(), IP, "link", "set", "lo", "up"],
            [*h.exec_prefix(), IP, "link", "set", inner, "name", "eth0"],
            [*h.exec_prefix(), IP, "addr", "add", f"{h.address}/24", "dev", "eth0"],
            [*h.exec_prefix(), IP, "link", "set", "eth0", "up"],
        ]
    return cmds


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        msg = f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}"
        raise RuntimeError(msg)
    return proc


def complete() -> bool:
    """The bridge and every host exist (a kept run's, with its stack still bound)."""
    spaces, links = leftovers()
    return {h.netns for h in ALL} <= set(spaces) and {BRIDGE, *(h.veth for h in ALL)} <= set(links)


def setup() -> None:
    """Build the bridge and the three hosts, unless they all exist (links set up again);
    a partial leftover is torn down first."""
    if complete():
        for h in ALL:
            restore(h)
        return
    teardown()
    for cmd in setup_commands():
        _run(cmd)


def leftovers() -> tuple[list[str], list[str]]:
    """(namespaces, links) named `esk-*` that exist now."""
    spaces = [
        line.split()[0]
        for line in _run([IP, "netns", "list"], check=False).stdout.splitlines()
        if line.startswith(PREFIX)
    ]
    links = []
    for line in _run([IP, "-o", "link", "show"], check=False).stdout.splitlines():
        parts = line.split(": ")
        if len(parts) > 1 and parts[1].split("@")[0].startswith(PREFIX):
            links.append(parts[1].split("@")[0])
    return spaces, links


def teardown() -> list[str]:
    """Remove every `esk-*` namespace and link (deleting a namespace deletes its veth
    end, and with it the pair); returns what it removed."""
    spaces, links = leftovers()
    for ns in spaces:
        _run([IP, "netns", "delete", ns], check=False)
    _, links_left = leftovers()
    for link in links_left:
        _run([IP, "link", "delete", link], check=False)
    return spaces + links


def cut(host: Host) -> None:
    _run([IP, "link", "set", host.veth, "down"])


def restore(host: Host) -> None:
    _run([IP, "link", "set", host.veth, "up"])


def reachable(host: Host, address: str, port: int) -> bool:
    """A TCP connection from `host` to address:port succeeds (checks the wiring)."""
    code = (
        "import socket,sys;s=socket.socket();s.settimeout(3);"
        f"sys.exit(s.connect_ex(({address!r},{port})))"
    )
    return _run([*host.exec_prefix(), "python3", "-c", code], check=False).returncode == 0
