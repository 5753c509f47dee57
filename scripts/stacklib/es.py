"""The Elasticsearch node: a single node from the distribution on Maven Central, security off
or (in secure mode, es_secure.py) on, run as an unprivileged user when we are root.

With ES_DISTRIBUTION=opensearch the same node is OpenSearch's (its integ-test-zip has the
same layout under other names, and a Painless module from painless.py), security off."""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from . import es_secure, jdk, maven, painless
from .config import (
    ADMIN_USER,
    CACHE_DIR,
    ES_CLUSTER_NAME,
    ES_DIR,
    ES_DISTRIBUTION,
    ES_HEAP,
    ES_INITIAL_MASTERS,
    ES_NODE_NAME,
    ES_NODE_ROLES,
    ES_PORT,
    ES_SEED_HOSTS,
    ES_TRANSPORT_PORT,
    ES_USER,
    ES_VERSION,
    OPENSEARCH_VERSION,
    SECURE_DIR,
    SECURE_ENV,
    SINK_USER,
    STACK_DIR,
    STACK_HOST,
    StackError,
    log,
)
from .files import render
from .procs import check_ports, pid_alive, run_quiet, spawn, stop, wait_until
from .secure import secure, tls_context

STATE_DIR = ES_DIR
PID_FILE = ES_DIR / "es.pid"
LOG_FILE = ES_DIR / "es.log"

# The distribution: one name for the Maven group and artifact, the zip, its top directory,
# the start script, the .yml and the environment variables' prefix.
OPENSEARCH = ES_DISTRIBUTION == "opensearch"
BASE = "opensearch" if OPENSEARCH else "elasticsearch"
NAME = "OpenSearch" if OPENSEARCH else "Elasticsearch"
VERSION = OPENSEARCH_VERSION if OPENSEARCH else ES_VERSION
ENV = "OPENSEARCH" if OPENSEARCH else "ES"


def check_distribution() -> None:
    if ES_DISTRIBUTION not in ("elasticsearch", "opensearch"):
        raise StackError(f"ES_DISTRIBUTION={ES_DISTRIBUTION}: expected elasticsearch or opensearch")


def es_java_home() -> str:
    """A full JDK >= 21: ES 9 refuses older Javas and self-attaches its entitlement agent.

    OpenSearch 3 needs 21+ too; OpenSearch 2 needs 17-23 (Java 24 dropped the security
    manager it installs)."""
    low, high = (17, 23) if OPENSEARCH and VERSION.split(".")[0] in ("1", "2") else (21, 999)
    if home := os.environ.get("ES_JAVA_HOME"):
        if not (Path(home) / "bin" / "java").exists():
            raise StackError(f"ES_JAVA_HOME={home} has no bin/java")
        return home
    best = jdk.newest(low, high)
    if best is None and OPENSEARCH:
        raise StackError(
            f"no JDK {low}-{high} found under /usr/lib/jvm: OpenSearch {VERSION} needs one; "
            "set ES_JAVA_HOME"
        )
    if best is None:
        raise StackError(
            "no JDK 21+ found under /usr/lib/jvm: Elasticsearch 9 needs one; set ES_JAVA_HOME"
        )
    return best


def download() -> Path:
    """The distribution's zip, downloaded once into the cache: the one choice of artifact.

    The integ-test-zip is the smallest distribution on Maven Central that still has the
    security module (it lacks analysis-common, which es_secure makes up for).
    """
    check_distribution()
    if OPENSEARCH:  # scripted updates
        painless.download(VERSION)
    return maven.artifact(
        f"org.{BASE}.distribution.integ-test-zip:{BASE}:{VERSION}:zip",
        CACHE_DIR / f"{BASE}-{VERSION}.zip",
        NAME,
        f"{NAME} {VERSION} (integ-test-zip)",
    )


def es_user() -> str | None:
    """ES refuses to run as root: use (and create) an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(ES_USER)
    except KeyError:
        run_quiet(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ES_USER],
            f"creating user {ES_USER}",
        )
    return ES_USER


def get(path: str, timeout: float = 5) -> tuple[int, dict[str, Any]]:
    """GET `path` on the node: (HTTP status, JSON body); (0, {}) if it does not answer."""
    try:
        if secure():
            # HTTPS verified against the local CA, as the superuser of the file realm.
            req = urllib.request.Request(f"https://{STACK_HOST}:{ES_PORT}{path}")
            creds = json.loads((SECURE_DIR / "credentials.json").read_text())
            auth = f"{ADMIN_USER}:{creds['es_admin_password']}".encode()
            req.add_header("Authorization", "Basic " + base64.b64encode(auth).decode())
            with urllib.request.urlopen(req, timeout=timeout, context=tls_context()) as r:
                return r.status, json.loads(r.read() or b"{}")
        with urllib.request.urlopen(f"http://{STACK_HOST}:{ES_PORT}{path}", timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, {}
    except (OSError, ValueError):
        return 0, {}


def discovery(data: Path) -> list[str]:
    """The discovery lines of elasticsearch.yml: a single node, or a node of a cluster.

    A cluster node finds the others at ES_SEED_HOSTS (transport addresses). The very first
    start of a new cluster needs ES_INITIAL_MASTERS (the master-eligible node names that
    vote in the first election); Elasticsearch wants that setting gone once the node has
    joined, so it is written only while the node's data directory is empty. ES_NODE_ROLES
    (e.g. `master`) makes a node that holds no data: a third master-eligible node keeps
    two data nodes restartable one at a time (with only two master-eligible nodes, the
    voting configuration holds one of them, and restarting that one leaves the cluster
    without a master until it is back)."""
    if not ES_SEED_HOSTS:
        if ES_INITIAL_MASTERS or ES_NODE_ROLES:
            raise StackError("ES_INITIAL_MASTERS and ES_NODE_ROLES need ES_SEED_HOSTS (a cluster)")
        return ["discovery.type: single-node"]
    lines = [f"discovery.seed_hosts: [{', '.join(ES_SEED_HOSTS)}]"]
    fresh = not data.is_dir() or not any(data.iterdir())
    if ES_INITIAL_MASTERS and fresh:
        lines.append(f"cluster.initial_master_nodes: [{', '.join(ES_INITIAL_MASTERS)}]")
    if ES_NODE_ROLES:
        lines.append(f"node.roles: [{', '.join(ES_NODE_ROLES)}]")
    return lines


def up() -> None:
    check_distribution()
    if pid_alive(PID_FILE):
        log(f"{NAME} already running on http://{STACK_HOST}:{ES_PORT}")
        return
    check_ports(NAME, {"ES_PORT": ES_PORT, "ES_TRANSPORT_PORT": ES_TRANSPORT_PORT})
    is_secure = secure()
    if is_secure and OPENSEARCH:
        raise StackError("secure mode (STACK_SECURE) runs Elasticsearch only, not OpenSearch")
    java_home = es_java_home()
    archive = download()
    home = STACK_DIR / f"{BASE}-{VERSION}"
    if not (home / "bin" / BASE).exists():
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(STACK_DIR)
        for script in (home / "bin").iterdir():
            script.chmod(0o755)  # zipfile drops the exec bits
    if OPENSEARCH:  # scripted updates
        painless.install(home, VERSION)
    conf = ES_DIR / "conf"
    if not conf.exists():
        shutil.copytree(home / "config", conf)
    lines = discovery(ES_DIR / "data")  # before the data directory exists
    for sub in ("data", "logs", "tmp"):
        (ES_DIR / sub).mkdir(parents=True, exist_ok=True)
    # OpenSearch takes the same settings, but no xpack ones.
    security = ["xpack.security.enabled: false"] if not OPENSEARCH else []
    (conf / f"{BASE}.yml").write_text(
        render(
            "elasticsearch.yml",
            cluster_name=ES_CLUSTER_NAME,
            node_name=ES_NODE_NAME,
            discovery=lines,
            data=str(ES_DIR / "data"),
            logs=str(ES_DIR / "logs"),
            host=STACK_HOST,
            http_port=str(ES_PORT),
            transport_port=str(ES_TRANSPORT_PORT),
            security=(es_secure.settings(conf) if is_secure else security),
            extra=os.environ.get("STACK_ES_SETTINGS", "").replace("\\n", "\n"),
        )
    )
    (conf / "jvm.options.d" / "heap.options").write_text(f"-Xms{ES_HEAP}\n-Xmx{ES_HEAP}\n")
    if is_secure and not (home / "modules" / "x-pack-security").is_dir():
        raise StackError(
            f"secure mode needs Elasticsearch's security module, and {home / 'modules'} "
            "has no x-pack-security"
        )
    if is_secure:
        es_secure.analysis_plugin(home, java_home)
    user = es_user()
    if user:
        for path in (home, ES_DIR):
            run_quiet(["chown", "-R", f"{user}:{user}", str(path)], f"chown {path}")
        STACK_DIR.chmod(0o755)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        f"{ENV}_JAVA_HOME": java_home,
        f"{ENV}_PATH_CONF": str(conf),
        f"{ENV}_TMPDIR": str(ES_DIR / "tmp"),
        "HOME": str(ES_DIR),
    }
    LOG_FILE.write_bytes(b"")
    t0 = time.monotonic()
    proc = spawn([str(home / "bin" / BASE)], LOG_FILE, PID_FILE, env, user)
    wait_until(
        NAME,
        proc,
        PID_FILE,
        LOG_FILE,
        lambda: get("/_cluster/health?wait_for_status=yellow&timeout=2s", 5)[0] == 200,
    )
    _, info = get("/")
    version = info.get("version", {}).get("number", VERSION)
    scheme = "https" if is_secure else "http"
    took = time.monotonic() - t0
    node = f" (node {ES_NODE_NAME} of cluster {ES_CLUSTER_NAME})" if ES_SEED_HOSTS else ""
    log(f"{NAME} {version} up on {scheme}://{STACK_HOST}:{ES_PORT}{node} in {took:.1f}s")
    if is_secure:
        log(
            f"Elasticsearch security on (TLS, users {SINK_USER} and {ADMIN_USER}); "
            f"CA and passwords in {SECURE_ENV}"
        )


def down() -> None:
    stop(NAME, PID_FILE)


def status(is_secure: bool) -> bool:
    """Log whether the node runs and answers, with its health."""
    pid = pid_alive(PID_FILE)
    code, health = get("/_cluster/health")
    scheme = "https" if is_secure else "http"
    if pid and code == 200:
        log(
            f"{NAME} {VERSION}: running (pid {pid}) on {scheme}://{STACK_HOST}:{ES_PORT}, "
            f"health {health.get('status')}, log {LOG_FILE}"
        )
        return True
    if pid:
        log(f"{NAME}: process {pid} alive but not answering on {scheme}://{STACK_HOST}:{ES_PORT}")
    else:
        log(f"{NAME}: not running")
    return False
