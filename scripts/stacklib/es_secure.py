"""Elasticsearch in secure mode: TLS on HTTP and transport, file-realm users, and a small
analysis plugin that the integ-test-zip needs for the .security index."""

from __future__ import annotations

import base64
import hashlib
import secrets
import shutil
import zipfile
from pathlib import Path

from .config import ADMIN_USER, CACHE_DIR, ES_VERSION, SECURE_DIR, SINK_USER, STACK_DIR, StackError
from .files import render, template, write_private
from .procs import run_quiet
from .secure import secure_material

# The integ-test-zip lacks the analysis-common module, but the .security index (API keys,
# tokens, native users) defines an `email` analyzer with three of its components: without
# them Elasticsearch cannot create that index, and creating an API key fails with "Unknown
# filter type [pattern_capture] for [email]". Secure mode compiles this small plugin
# (templates/EsSinkAnalysisPlugin.java), which registers the three on top of Lucene's own
# implementations, and installs it as a plugin. The jar is cached by the source's digest.
ANALYSIS_PLUGIN = "es-sink-analysis"
ANALYSIS_PLUGIN_SOURCE = "EsSinkAnalysisPlugin.java"


def pbkdf2_hash(password: str) -> str:
    """Elasticsearch's `{PBKDF2}` password hash (PBKDF2-HMAC-SHA512, 10,000 rounds)."""
    salt = secrets.token_bytes(32)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 10000, 32)
    b64 = base64.b64encode
    return f"{{PBKDF2}}10000${b64(salt).decode()}${b64(digest).decode()}"


def settings(conf: Path) -> list[str]:
    """elasticsearch.yml lines for security, after writing certificates and file-realm users.

    TLS on HTTP, and on transport too: without it a node bound to loopback still starts,
    but its bootstrap checks warn "Transport SSL must be enabled if security is enabled",
    which is a start-up error in production mode (any non-loopback address). Users live in
    the file realm (conf/users, users_roles, roles.yml), hashed with PBKDF2; API keys on.
    """
    creds = secure_material()
    certs = conf / "certs"
    certs.mkdir(exist_ok=True)
    for name in ("ca.crt", "server.crt", "server.key"):
        shutil.copyfile(SECURE_DIR / name, certs / name)
    (certs / "server.key").chmod(0o600)
    write_private(
        conf / "users",
        f"{SINK_USER}:{pbkdf2_hash(creds['es_password'])}\n"
        f"{ADMIN_USER}:{pbkdf2_hash(creds['es_admin_password'])}\n",
    )
    (conf / "users_roles").write_text(f"es_sink_writer:{SINK_USER}\nsuperuser:{ADMIN_USER}\n")
    (conf / "roles.yml").write_text(render("es-roles.yml"))
    tls = [
        "key: certs/server.key",
        "certificate: certs/server.crt",
        "certificate_authorities: [certs/ca.crt]",
    ]
    return [
        "xpack.security.enabled: true",
        "xpack.security.authc.api_key.enabled: true",
        "xpack.security.http.ssl.enabled: true",
        *(f"xpack.security.http.ssl.{line}" for line in tls),
        "xpack.security.transport.ssl.enabled: true",
        "xpack.security.transport.ssl.verification_mode: certificate",
        *(f"xpack.security.transport.ssl.{line}" for line in tls),
    ]


def analysis_plugin(home: Path, java_home: str) -> None:
    """Install the analysis plugin above unless the distribution has analysis-common."""
    target = home / "plugins" / ANALYSIS_PLUGIN
    if (home / "modules" / "analysis-common").is_dir() or target.is_dir():
        return
    source = template(ANALYSIS_PLUGIN_SOURCE)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    jar = CACHE_DIR / f"{ANALYSIS_PLUGIN}-{ES_VERSION}-{digest}.jar"
    if not jar.exists():
        javac = Path(java_home) / "bin" / "javac"
        if not javac.exists():
            raise StackError(f"secure mode compiles a small plugin, and {java_home} has no javac")
        build = STACK_DIR / "analysis-plugin-build"
        shutil.rmtree(build, ignore_errors=True)
        src = build / "src" / ANALYSIS_PLUGIN_SOURCE
        src.parent.mkdir(parents=True)
        src.write_text(source)
        run_quiet(
            [str(javac), "--release", "21", "-nowarn", "-cp", f"{home / 'lib'}/*",
             "-d", str(build / "classes"), str(src)],
            "compiling the analysis plugin (javac)",
        )  # fmt: skip
        partial = jar.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w") as zf:
            for cls in sorted((build / "classes").rglob("*.class")):
                zf.write(cls, cls.relative_to(build / "classes").as_posix())
        partial.rename(jar)
        shutil.rmtree(build, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copyfile(jar, target / f"{ANALYSIS_PLUGIN}.jar")
    (target / "plugin-descriptor.properties").write_text(
        "\n".join(
            [
                "description=pattern_capture, unique and uax_url_email for the .security index",
                f"version={ES_VERSION}",
                f"name={ANALYSIS_PLUGIN}",
                "classname=essink.analysis.EsSinkAnalysisPlugin",
                "java.version=21",
                f"elasticsearch.version={ES_VERSION}",
                "",
            ]
        )
    )
