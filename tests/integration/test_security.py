"""Secured connections against a real secure stack of their own (`STACK_SECURE=1
scripts/stack`): Elasticsearch with TLS and authentication (basic and API key), Kafka over a
SASL_SSL (SCRAM-SHA-512) listener for both the consumer and the dead-letter producer, wrong
credentials failing clearly, and no password, API key or SASL password in the flow's output,
its /metrics or its dead letters. See docs/security.md."""

from __future__ import annotations

import os
import signal
import socket
import stat
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from tests.support.flows import (
    Services,
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    run_flow,
    start_flow,
    wait_for,
)
from tests.support.stack import stack

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

pytestmark = pytest.mark.system

KAFKA_PORT = int(os.environ.get("ES_SINK_TEST_SECURE_KAFKA_PORT", "19096"))  # +1, +2 too
ES_PORT = int(os.environ.get("ES_SINK_TEST_SECURE_ES_PORT", "19250"))  # transport +100
STACK_DIR = os.environ.get("ES_SINK_TEST_STACK_DIR", "/var/tmp/es-sink-test") + "-secure"
DLQ_P = "__connect.errors."
GOOD = 40


@dataclass
class SecureStack:
    """The secure stack's client settings (from STACK_DIR/secure.env) and its stdout."""

    env: dict[str, str]
    plain_kafka: str
    stack_output: str

    @property
    def services(self) -> Services:
        """Where the flow connects: the SASL_SSL listener and the HTTPS node."""
        return Services(self.env["KAFKA_BOOTSTRAP_SERVERS"], self.env["ES_HOSTS"])

    def kafka_env(self) -> dict[str, str]:
        return {k: v for k, v in self.env.items() if k.startswith("KAFKA_CONFIG_")}

    def es(self, **auth: Any) -> Elasticsearch:
        """A client of the secure node: the superuser's, or with the given auth."""
        from elasticsearch import Elasticsearch

        if not auth:
            auth = {
                "basic_auth": (
                    self.env["STACK_ES_ADMIN_USERNAME"],
                    self.env["STACK_ES_ADMIN_PASSWORD"],
                )
            }
        return Elasticsearch(self.env["ES_HOSTS"], ca_certs=self.env["ES_CA_CERTS"], **auth)


def _stack(action: str, which: str = "") -> str:
    env = {
        "STACK_SECURE": "1",
        "STACK_DIR": STACK_DIR,
        "KAFKA_PORT": str(KAFKA_PORT),
        "KAFKA_CONTROLLER_PORT": str(KAFKA_PORT + 1),
        "KAFKA_SECURE_PORT": str(KAFKA_PORT + 2),
        "ES_PORT": str(ES_PORT),
        "ES_TRANSPORT_PORT": str(ES_PORT + 100),
    }
    return stack(action, env, *([which] if which else []))


@pytest.fixture(scope="module")
def secure_stack() -> Iterator[SecureStack]:
    """A Kafka broker with a SASL_SSL listener and a secured Elasticsearch node, from empty."""
    _stack("clean")
    try:
        output = _stack("up")
        env_file = Path(STACK_DIR) / "secure.env"
        env = {}
        for line in env_file.read_text().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.partition("=")
                env[name] = value
        yield SecureStack(env, env["STACK_KAFKA_PLAINTEXT_SERVERS"], output)
    finally:
        _stack("down")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _name(prefix: str) -> str:
    return f"t-sec-{prefix}-{uuid.uuid4().hex[:8]}"


def _check_no_secrets(where: str, text: str | bytes, secrets: list[str]) -> None:
    data = text.encode() if isinstance(text, str) else text
    for i, secret in enumerate(secrets):
        # Never print the secret in a failure (pytest shows an assert's operands): say
        # which one and where.
        leaked = secret.encode() in data
        assert not leaked, f"secret #{i} appears in {where}"


def _masked(text: str, secrets: list[str]) -> str:
    """`text` with each secret replaced: what a failure message may show."""
    for secret in secrets:
        text = text.replace(secret, "<secret>")
    return text


def _produce_records(stack: SecureStack, topic: str, secrets: list[str]) -> list[bytes]:
    """GOOD good records, one whose transform error quotes the settings, and per secret one
    record that fails to decode and one that Elasticsearch rejects, each carrying the secret
    in its value. Returns the keys of the records whose value carries a secret."""
    create_topic(stack.plain_kafka, topic)
    messages: list[tuple[bytes | None, bytes | None]] = [
        (f"k{i}".encode(), orjson.dumps({"n": i})) for i in range(GOOD)
    ]
    messages.append((b"leaky-transform", orjson.dumps({"n": -1, "leak": True})))
    secret_keys = []
    for i, secret in enumerate(secrets):
        # Not JSON: the decode error quotes the payload's first 64 bytes, the secret included.
        messages.append((f"secret-decode-{i}".encode(), secret.encode()))
        # `n` is a long: Elasticsearch's mapping error previews the offending value.
        messages.append((f"secret-index-{i}".encode(), orjson.dumps({"n": secret})))
        secret_keys += [f"secret-decode-{i}".encode(), f"secret-index-{i}".encode()]
    produce(stack.plain_kafka, topic, messages)
    return secret_keys


def _run_and_scan(
    stack: SecureStack,
    auth_env: dict[str, str],
    secrets: list[str],
    tmp_path: Path,
    also_scan: tuple[str, ...] = (),
) -> None:
    """Run the flow over SASL_SSL and HTTPS with a dead-letter topic and /metrics, check that
    it indexed and dead-lettered what it should, and that no secret leaked anywhere.

    `secrets` are configured in the flow and planted in records; `also_scan` are secret too
    but unknown to the flow (so not planted), and must not appear either."""
    topic, dlq = _name("src"), _name("dlq")
    create_topic(stack.plain_kafka, dlq)  # the flow refuses a missing DLQ_TOPIC at start
    admin = stack.es()
    # `n` is numeric, so a record with a secret string in `n` is rejected at index time.
    admin.indices.create(
        index=topic,
        mappings={"properties": {"n": {"type": "long"}}},
        settings={"number_of_replicas": 0},
    )
    secret_keys = _produce_records(stack, topic, secrets)
    port = _free_port()
    env = {
        **stack.kafka_env(),
        **auth_env,
        "ES_CA_CERTS": stack.env["ES_CA_CERTS"],
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_STOP_AT_END": "false",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
        "DLQ_STACKTRACE": "true",
        "TRANSFORMS": "tests.integration.security_transforms:leak_settings",
        "BYTEWAX_DATAFLOW_API_ENABLED": "true",
        "BYTEWAX_DATAFLOW_API_PORT": str(port),
    }
    dead = 1 + 2 * len(secrets)

    def scrape() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    everything = [*secrets, *also_scan]
    log = tmp_path / f"{topic}.log"
    proc = start_flow(stack.services, env, log=log)
    try:
        # Scraped while the flow runs, once everything is indexed and dead-lettered.
        done = [
            f"es_sink_docs_indexed_total {GOOD}.0",
            'es_sink_dead_letters_total{stage="transform"} 1.0',
            f'es_sink_dead_letters_total{{stage="deserialize"}} {len(secrets)}.0',
            f'es_sink_dead_letters_total{{stage="index"}} {len(secrets)}.0',
        ]
        try:
            wait_for(
                lambda: all(line in scrape() for line in done),
                120,
                "every record indexed or dead-lettered (per /metrics)",
            )
        except AssertionError as e:
            tail = _masked(log.read_text()[-3000:], everything)
            raise AssertionError(f"{e}; the flow's log ends:\n{tail}") from None
        metrics = scrape()
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert returncode == 0, _masked(output[-3000:], everything)

    assert count_docs(admin, topic) == GOOD
    assert sum(committed_offsets(stack.plain_kafka, topic, topic).values()) == GOOD + dead
    letters: list[Any] = consume_all(stack.plain_kafka, dlq)
    assert len(letters) == dead, _masked(output[-3000:], everything)
    by_key = {m.key(): m for m in letters}
    stages = {k: dict(m.headers())[DLQ_P + "stage"] for k, m in by_key.items()}
    assert stages[b"leaky-transform"] == b"transform"
    for i in range(len(secrets)):
        assert stages[f"secret-decode-{i}".encode()] == b"deserialize"
        assert stages[f"secret-index-{i}".encode()] == b"index"

    # The scan: output, metrics, every dead letter's headers and key, and the values of
    # the dead letters whose original record carried no secret.
    planted, secrets = secrets, everything
    _check_no_secrets("the flow's stdout/stderr", output, secrets)
    _check_no_secrets("/metrics", metrics, secrets)
    for key, m in by_key.items():
        headers = m.headers() or []
        for name, value in headers:
            _check_no_secrets(f"dead letter {key!r} header {name}", value or b"", secrets)
            _check_no_secrets(f"dead letter {key!r} header name", name, secrets)
        _check_no_secrets(f"dead letter {key!r} key", key or b"", secrets)
        if key in secret_keys:
            # A dead letter's value is the original record's bytes, by contract: this record
            # was produced with the secret in it, so it carries it back unchanged.
            assert any(s.encode() in m.value() for s in planted)
        else:
            _check_no_secrets(f"dead letter {key!r} value", m.value() or b"", secrets)

    # The scan found nothing because the secrets were masked, not because no error quoted
    # them: every secret-bearing message shows the mask where the secret was.
    for key in (b"leaky-transform", *secret_keys):
        message = dict(by_key[key].headers())[DLQ_P + "exception.message"]
        assert b"***" in message, (key, message)
    leaky = dict(by_key[b"leaky-transform"].headers())[DLQ_P + "exception.message"]
    for name in ("ES_PASSWORD", "ES_API_KEY", "KAFKA_CONFIG_SASL_PASSWORD"):
        if name in auth_env or name in env:
            assert f"{name}=***".encode() in leaky, leaky
    admin.close()


def test_stack_keeps_its_secrets_off_stdout_and_private(secure_stack):
    env = secure_stack.env
    secrets = [
        env["ES_PASSWORD"],
        env["STACK_ES_ADMIN_PASSWORD"],
        env["KAFKA_CONFIG_SASL_PASSWORD"],
    ]
    _check_no_secrets("scripts/stack's output", secure_stack.stack_output, secrets)
    env_file = Path(STACK_DIR) / "secure.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert env["ES_HOSTS"].startswith("https://")
    # Security really is on: no credentials, no access.
    es = secure_stack.es(basic_auth=("es_sink", "not-the-password"))
    from elasticsearch import AuthenticationException

    with pytest.raises(AuthenticationException):
        es.info()
    es.close()


def test_basic_auth_over_tls_and_sasl_ssl_indexes_and_leaks_nothing(secure_stack, tmp_path):
    env = secure_stack.env
    auth = {"ES_USERNAME": env["ES_USERNAME"], "ES_PASSWORD": env["ES_PASSWORD"]}
    secrets = [env["ES_PASSWORD"], env["KAFKA_CONFIG_SASL_PASSWORD"]]
    _run_and_scan(secure_stack, auth, secrets, tmp_path)


def test_api_key_over_tls_and_sasl_ssl_indexes_and_leaks_nothing(secure_stack, tmp_path):
    env = secure_stack.env
    # The flow's own user creates a key limited to its privileges (manage_own_api_key).
    writer = secure_stack.es(basic_auth=(env["ES_USERNAME"], env["ES_PASSWORD"]))
    key = writer.security.create_api_key(name=_name("key"), expiration="1h")
    writer.close()
    # The key really authenticates, as the flow's user.
    keyed = secure_stack.es(api_key=key["encoded"])
    assert keyed.security.authenticate()["username"] == env["ES_USERNAME"]
    keyed.close()
    auth = {"ES_API_KEY": key["encoded"]}
    secrets = [key["encoded"], env["KAFKA_CONFIG_SASL_PASSWORD"]]
    # The raw key half (inside the base64 `encoded` form) is as secret: scanned for too.
    _run_and_scan(secure_stack, auth, secrets, tmp_path, also_scan=(key["api_key"],))


def test_wrong_elasticsearch_password_fails_clearly(secure_stack):
    env = secure_stack.env
    topic = _name("wrong-es")
    create_topic(secure_stack.plain_kafka, topic)
    produce(secure_stack.plain_kafka, topic, [(b"k", b'{"n": 1}')])
    wrong = f"wrong-{uuid.uuid4().hex}"
    run = run_flow(
        secure_stack.services,
        {
            **secure_stack.kafka_env(),
            "ES_CA_CERTS": env["ES_CA_CERTS"],
            "ES_USERNAME": env["ES_USERNAME"],
            "ES_PASSWORD": wrong,
            "KAFKA_TOPICS": topic,
            "KAFKA_GROUP_ID": topic,
        },
        timeout=120,
    )
    secrets = [wrong, env["ES_PASSWORD"]]
    _check_no_secrets("the flow's output", run.output, secrets)
    out = _masked(run.output, secrets)
    assert run.returncode != 0, out[-3000:]
    # One line at start: the refusal, Elasticsearch's reason and the settings to check.
    assert "es_sink: configuration error: ES_HOSTS: Elasticsearch refused the credentials" in out
    assert "HTTP 401: security_exception: unable to authenticate user [es_sink]" in out
    assert "check ES_USERNAME/ES_PASSWORD" in out
    assert "Traceback" not in out
    # Nothing was written, so nothing is committed.
    assert sum(committed_offsets(secure_stack.plain_kafka, topic, topic).values()) <= 0


def test_wrong_sasl_password_fails_clearly(secure_stack):
    topic = _name("wrong-sasl")
    create_topic(secure_stack.plain_kafka, topic)
    wrong = f"wrong-{uuid.uuid4().hex}"
    run = run_flow(
        secure_stack.services,
        {
            **secure_stack.kafka_env(),
            "KAFKA_CONFIG_SASL_PASSWORD": wrong,
            "ES_CA_CERTS": secure_stack.env["ES_CA_CERTS"],
            "KAFKA_TOPICS": topic,
        },
        timeout=120,
    )
    secrets = [wrong, secure_stack.env["KAFKA_CONFIG_SASL_PASSWORD"]]
    _check_no_secrets("the flow's output", run.output, secrets)
    out = _masked(run.output, secrets)
    assert run.returncode != 0, out[-3000:]
    # One line at start naming the settings, with librdkafka's reason.
    assert (
        "es_sink: configuration error: KAFKA_CONFIG_SASL_USERNAME/KAFKA_CONFIG_SASL_PASSWORD" in out
    )
    assert "invalid credentials" in out
    assert "Traceback" not in out


def test_untrusted_certificate_is_refused(secure_stack):
    """Without ES_CA_CERTS the node's certificate (from the local CA) does not verify."""
    env = secure_stack.env
    topic = _name("no-ca")
    create_topic(secure_stack.plain_kafka, topic)
    produce(secure_stack.plain_kafka, topic, [(b"k", b'{"n": 1}')])
    run = run_flow(
        secure_stack.services,
        {
            **secure_stack.kafka_env(),
            "ES_USERNAME": env["ES_USERNAME"],
            "ES_PASSWORD": env["ES_PASSWORD"],
            "KAFKA_TOPICS": topic,
            "KAFKA_GROUP_ID": topic,
            "ES_RETRY_BUDGET_S": "1",
            "ES_RETRY_MAX_MS": "200",
        },
        timeout=120,
    )
    _check_no_secrets("the flow's output", run.output, [env["ES_PASSWORD"]])
    assert run.returncode != 0, run.output[-3000:]
    # One line at start naming ES_CA_CERTS, with the cause.
    assert "es_sink: configuration error: ES_CA_CERTS: TLS" in run.output, run.output[-3000:]
    assert "CERTIFICATE_VERIFY_FAILED" in run.output


def test_failed_record_under_errors_tolerance_none_leaks_nothing(secure_stack):
    env = secure_stack.env
    topic = _name("none")
    create_topic(secure_stack.plain_kafka, topic)
    produce(secure_stack.plain_kafka, topic, [(b"k", orjson.dumps({"leak": True}))])
    run = run_flow(
        secure_stack.services,
        {
            **secure_stack.kafka_env(),
            "ES_CA_CERTS": env["ES_CA_CERTS"],
            "ES_USERNAME": env["ES_USERNAME"],
            "ES_PASSWORD": env["ES_PASSWORD"],
            "KAFKA_TOPICS": topic,
            "KAFKA_GROUP_ID": topic,
            "TRANSFORMS": "tests.integration.security_transforms:leak_settings",
        },
        timeout=120,
    )
    secrets = [env["ES_PASSWORD"], env["KAFKA_CONFIG_SASL_PASSWORD"]]
    out = _masked(run.output, secrets)
    assert run.returncode != 0, out[-3000:]
    assert "failed at stage transform" in out, out[-3000:]
    _check_no_secrets("the flow's output", run.output, secrets)
