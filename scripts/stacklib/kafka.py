"""The Kafka broker: a single KRaft node (broker and controller) from Maven Central's jars,
with an extra SASL_SSL (SCRAM-SHA-512) listener in secure mode."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import secrets
import shutil
import socket
import ssl
import struct
import time
import uuid
from pathlib import Path

from . import maven
from .config import (
    CACHE_DIR,
    KAFKA_CONTROLLER_PORT,
    KAFKA_DIR,
    KAFKA_HEAP,
    KAFKA_PORT,
    KAFKA_SECURE_PORT,
    KAFKA_VERSION,
    SECURE_DIR,
    SECURE_ENV,
    SINK_USER,
    STACK_HOST,
    StackError,
    log,
)
from .files import render, write_private
from .procs import check_ports, pid_alive, run_quiet, spawn, stop, wait_until
from .secure import secure, secure_material, tls_context

POM = Path(__file__).resolve().parent.parent / "kafka-pom.xml"
STATE_DIR = KAFKA_DIR
PID_FILE = KAFKA_DIR / "kafka.pid"
LOG_FILE = KAFKA_DIR / "kafka.log"
SCRAM_ITERATIONS = 4096


def java_for_kafka() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError(
            "no 'java' on PATH: Kafka needs Java 17 or later "
            "(apt-get install openjdk-17-jdk-headless)"
        )
    return java


def download() -> Path:
    """The broker's classpath (a directory of jars), downloaded once into the cache."""
    libs = CACHE_DIR / f"kafka-{KAFKA_VERSION}" / "libs"
    if (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return libs
    log(f"downloading Kafka {KAFKA_VERSION} from Maven Central into {libs}")
    t0 = time.monotonic()
    maven.classpath(POM, {"kafka.version": KAFKA_VERSION}, libs, "Kafka")
    log(f"Kafka downloaded in {time.monotonic() - t0:.1f}s ({maven.dir_mb(libs):.0f} MB)")
    return libs


def answers(port: int = KAFKA_PORT, tls: ssl.SSLContext | None = None) -> bool:
    """Send an ApiVersions v0 request: the broker answers it only once its listener serves.

    On a SASL_SSL listener ApiVersions is allowed before authentication, over TLS.
    """
    try:
        with contextlib.ExitStack() as stack:
            s = stack.enter_context(socket.create_connection((STACK_HOST, port), timeout=2))
            if tls is not None:
                s = stack.enter_context(tls.wrap_socket(s, server_hostname=STACK_HOST))
            client = b"stack"
            body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", recv_exact(s, 4))[0]
            resp = recv_exact(s, size)
            corr, err = struct.unpack(">ih", resp[:6])
            return corr == 1 and err == 0
    except (OSError, struct.error):
        return False


CREATE_TOPICS_TIMEOUT_MS = 30_000
TOPIC_ALREADY_EXISTS = 36


def create_topic(name: str, partitions: int, port: int = KAFKA_PORT) -> bool:
    """Create topic `name` with a CreateTopics v4 request (the broker's default replication
    factor and settings); False when it exists already. The admin protocol, not the
    broker's `kafka-topics` tool: Maven's Kafka jars do not include the tools."""
    client, topic = b"stack", name.encode()
    request = (
        struct.pack(">hhih", 19, 4, 1, len(client)) + client
        + struct.pack(">ih", 1, len(topic)) + topic
        # the broker's replication factor; no assignments, no configs
        + struct.pack(">ihii", partitions, -1, 0, 0)
        + struct.pack(">ib", CREATE_TOPICS_TIMEOUT_MS, 0)  # not validate-only
    )  # fmt: skip
    try:
        with socket.create_connection((STACK_HOST, port), timeout=35) as s:
            s.sendall(struct.pack(">i", len(request)) + request)
            resp = recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
        # correlation id, throttle time, one topic: its name, error code, error message
        (n,) = struct.unpack_from(">h", resp, 12)
        code, size = struct.unpack_from(">hh", resp, 14 + n)
        message = resp[18 + n : 18 + n + size].decode() if size > 0 else ""
    except (OSError, struct.error) as e:
        raise StackError(f"Kafka at {STACK_HOST}:{port} did not answer: {e}") from e
    if code == TOPIC_ALREADY_EXISTS:
        return False
    if code:
        raise StackError(f"Kafka refused topic {name}: error {code} {message}".rstrip())
    return True


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def scram_credential(password: str) -> str:
    """An --add-scram entry with a salted password, so the password stays off argv."""
    salt = secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, SCRAM_ITERATIONS)
    b64 = base64.b64encode
    return (
        f"SCRAM-SHA-512=[name={SINK_USER},iterations={SCRAM_ITERATIONS},"
        f'salt="{b64(salt).decode()}",saltedpassword="{b64(salted).decode()}"]'
    )


def server_properties(data: Path, creds: dict[str, str], is_secure: bool) -> str:
    """server.properties: PLAINTEXT and CONTROLLER listeners, plus SASL_SSL when secure."""
    listeners = (
        f"PLAINTEXT://{STACK_HOST}:{KAFKA_PORT},CONTROLLER://{STACK_HOST}:{KAFKA_CONTROLLER_PORT}"
    )
    protocol_map = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    secure_lines: list[str] = []
    if is_secure:
        # An extra SASL_SSL listener; inter-broker and controller traffic stay PLAINTEXT.
        listeners += f",SASL_SSL://{STACK_HOST}:{KAFKA_SECURE_PORT}"
        protocol_map += ",SASL_SSL:SASL_SSL"
        secure_lines = [
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.location={SECURE_DIR / 'kafka.p12'}",
            f"ssl.keystore.password={creds['keystore_password']}",
            f"ssl.key.password={creds['keystore_password']}",
        ]
    return render(
        "kafka-server.properties",
        host=STACK_HOST,
        controller_port=str(KAFKA_CONTROLLER_PORT),
        listeners=listeners,
        protocol_map=protocol_map,
        secure_lines=secure_lines,
        data=str(data),
    )


def up() -> None:
    if pid_alive(PID_FILE):
        log(f"Kafka already running on {STACK_HOST}:{KAFKA_PORT}")
        return
    ports = {"KAFKA_PORT": KAFKA_PORT, "KAFKA_CONTROLLER_PORT": KAFKA_CONTROLLER_PORT}
    is_secure = secure()
    if is_secure:
        ports["KAFKA_SECURE_PORT"] = KAFKA_SECURE_PORT
    check_ports("Kafka", ports)
    java = java_for_kafka()
    libs = download()
    data = KAFKA_DIR / "data"
    KAFKA_DIR.mkdir(parents=True, exist_ok=True)
    creds = secure_material() if is_secure else {}
    scram_marker = KAFKA_DIR / "scram-users"
    if is_secure and (data / "meta.properties").exists() and not scram_marker.exists():
        raise StackError(
            f"Kafka's data in {data} was formatted without SCRAM users (a plain start); "
            "run `scripts/stack clean` before starting it in secure mode"
        )
    props = KAFKA_DIR / "server.properties"
    text = server_properties(data, creds, is_secure)
    # Secure mode puts the keystore password in it: readable by its owner only.
    write_private(props, text) if is_secure else props.write_text(text)
    log4j = KAFKA_DIR / "log4j2.properties"
    log4j.write_text(render("kafka-log4j2.properties"))
    common = [f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*"]
    meta = data / "meta.properties"
    if not meta.exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        run_quiet(
            [
                java,
                *common,
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                f"--cluster-id={cluster_id}",
                "--config",
                str(props),
                # SCRAM users exist only once written into the metadata log at format time.
                *(["--add-scram", scram_credential(creds["kafka_password"])] if is_secure else []),
            ],
            "Kafka storage format",
        )
        if is_secure:
            scram_marker.write_text(f"{SINK_USER}\n")
    LOG_FILE.write_bytes(b"")
    cmd = [
        java,
        f"-Xms{min_heap(KAFKA_HEAP)}",
        f"-Xmx{KAFKA_HEAP}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        *common,
        "kafka.Kafka",
        str(props),
    ]
    t0 = time.monotonic()
    proc = spawn(cmd, LOG_FILE, PID_FILE, dict(os.environ))
    wait_until(
        "Kafka",
        proc,
        PID_FILE,
        LOG_FILE,
        lambda: (
            "Kafka Server started" in LOG_FILE.read_text(errors="replace")
            and answers()
            and (not is_secure or answers(KAFKA_SECURE_PORT, tls_context()))
        ),
    )
    log(f"Kafka {KAFKA_VERSION} up on {STACK_HOST}:{KAFKA_PORT} in {time.monotonic() - t0:.1f}s")
    if is_secure:
        log(
            f"Kafka SASL_SSL (SCRAM-SHA-512, user {SINK_USER}) on "
            f"{STACK_HOST}:{KAFKA_SECURE_PORT}; client settings in {SECURE_ENV}"
        )


def min_heap(heap: str) -> str:
    return "256m" if heap == "512m" else heap


def down() -> None:
    stop("Kafka", PID_FILE)


def status(is_secure: bool) -> bool:
    """Log whether the broker runs and answers (on the SASL_SSL listener too when secure)."""
    pid = pid_alive(PID_FILE)
    if pid and is_secure and not answers(KAFKA_SECURE_PORT, tls_context()):
        log(f"Kafka: SASL_SSL listener {STACK_HOST}:{KAFKA_SECURE_PORT} not answering")
        return False
    if pid and answers():
        secure_note = f" and SASL_SSL {STACK_HOST}:{KAFKA_SECURE_PORT}" if is_secure else ""
        log(
            f"Kafka {KAFKA_VERSION}: running (pid {pid}) on {STACK_HOST}:{KAFKA_PORT}"
            f"{secure_note}, log {LOG_FILE}"
        )
        return True
    if pid:
        log(f"Kafka: process {pid} alive but not answering on {STACK_HOST}:{KAFKA_PORT}")
    else:
        log("Kafka: not running")
    return False
