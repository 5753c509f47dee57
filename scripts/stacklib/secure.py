"""Secure mode's shared material: the switch, generated passwords, a local CA and a server
certificate for 127.0.0.1/localhost, Kafka's keystore, and the clients' secure.env.

What each server does with them is in kafka.py and es_secure.py; see docs/security.md.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
import time

from .config import (
    ADMIN_USER,
    ES_PORT,
    KAFKA_PORT,
    KAFKA_SECURE_PORT,
    SECURE_DIR,
    SECURE_ENV,
    SINK_USER,
    STACK_DIR,
    StackError,
    log,
)
from .files import render, write_private
from .procs import run_quiet


def secure() -> bool:
    """STACK_SECURE=1/0; unset: secure if this STACK_DIR was started secure (until clean)."""
    flag = os.environ.get("STACK_SECURE", "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    if flag:
        raise StackError(f"STACK_SECURE={flag!r}: expected 1 (secure) or 0 (plain)")
    return SECURE_ENV.exists()


def credentials() -> dict[str, str]:
    """The generated passwords of this STACK_DIR (made once, reused by every later `up`)."""
    path = SECURE_DIR / "credentials.json"
    if path.exists():
        return json.loads(path.read_text())
    creds = {
        "es_password": secrets.token_hex(16),
        "es_admin_password": secrets.token_hex(16),
        "kafka_password": secrets.token_hex(16),
        "keystore_password": secrets.token_hex(16),
    }
    write_private(path, json.dumps(creds, indent=2) + "\n")
    return creds


def secure_material() -> dict[str, str]:
    """CA, server certificate and key, Kafka's PKCS#12 keystore, passwords, secure.env."""
    SECURE_DIR.mkdir(parents=True, exist_ok=True)
    SECURE_DIR.chmod(0o700)
    creds = credentials()
    d = SECURE_DIR
    if not (d / "kafka.p12").exists():
        openssl = shutil.which("openssl")
        if not openssl:
            raise StackError("no 'openssl' on PATH: secure mode makes its certificates with it")
        t0 = time.monotonic()
        cnf = d / "openssl.cnf"
        cnf.write_text(render("openssl.cnf"))
        run_quiet(
            [openssl, "req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-days", "3650", "-config", str(cnf), "-extensions", "ca_ext",
             "-subj", "/CN=es-sink local CA", "-keyout", str(d / "ca.key"),
             "-out", str(d / "ca.crt")],
            "making the local CA (openssl)",
        )  # fmt: skip
        run_quiet(
            [openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-config", str(cnf), "-subj", "/CN=localhost",
             "-keyout", str(d / "server.key"), "-out", str(d / "server.csr")],
            "making the server key (openssl)",
        )  # fmt: skip
        run_quiet(
            [openssl, "x509", "-req", "-sha256", "-days", "825", "-in", str(d / "server.csr"),
             "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"), "-set_serial",
             str(secrets.randbits(63)), "-extfile", str(cnf), "-extensions", "server_ext",
             "-out", str(d / "server.crt")],
            "signing the server certificate (openssl)",
        )  # fmt: skip
        # The keystore password reaches openssl through its environment, not its argv.
        proc = subprocess.run(
            [openssl, "pkcs12", "-export", "-name", "kafka", "-in", str(d / "server.crt"),
             "-inkey", str(d / "server.key"), "-certfile", str(d / "ca.crt"),
             "-passout", "env:STACK_KEYSTORE_PASSWORD", "-out", str(d / "kafka.p12.partial")],
            capture_output=True, text=True,
            env={**os.environ, "STACK_KEYSTORE_PASSWORD": creds["keystore_password"]},
        )  # fmt: skip
        if proc.returncode != 0:
            raise StackError(f"making Kafka's keystore (openssl pkcs12) failed: {proc.stderr}")
        for key in ("ca.key", "server.key", "kafka.p12.partial"):
            (d / key).chmod(0o600)
        (d / "kafka.p12.partial").rename(d / "kafka.p12")
        log(f"secure mode: local CA and a certificate for 127.0.0.1/localhost made in "
            f"{time.monotonic() - t0:.1f}s ({d / 'ca.crt'})")  # fmt: skip
    write_private(
        SECURE_ENV,
        render(
            "secure.env",
            stack_dir=str(STACK_DIR),
            es_port=str(ES_PORT),
            ca=str(d / "ca.crt"),
            sink_user=SINK_USER,
            es_password=creds["es_password"],
            kafka_secure_port=str(KAFKA_SECURE_PORT),
            kafka_password=creds["kafka_password"],
            admin_user=ADMIN_USER,
            es_admin_password=creds["es_admin_password"],
            kafka_port=str(KAFKA_PORT),
        ),
    )
    return creds


def tls_context() -> ssl.SSLContext:
    """Verifies the local CA's server certificate, hostname (IP) included."""
    return ssl.create_default_context(cafile=str(SECURE_DIR / "ca.crt"))
