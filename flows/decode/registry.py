"""Schema Registry converters: the lazy client, framing, error classification; json-schema.

`json-schema`: Confluent Schema Registry framing (magic byte 0 + schema id, or magic byte 1
+ schema GUID, or the id in a `__value_schema_id`/`__key_schema_id` header), decoded by
confluent-kafka's `JSONDeserializer` with the writer schema fetched by id (cached by the
client; subjects use the TOPIC strategy, which only matters for data-contract rules).
Payloads are validated against the writer schema and parsed with the same rules as `json`.
`avro` (flows.decode.avro) and `protobuf` (flows.decode.protobuf) run through the same
`RegistryDecoder`.

The Schema Registry client is created on the first record that needs it, inside the
returned callable, never at import or build time; an unset `timeout` defaults to 30 s (the
client's own default is to wait forever). Which failures are record errors and which mean
the registry is unavailable: see flows.decode.common. A registry that answers HTTP 404
without a Schema Registry error code while it answers `GET /schemas/types` lacks that
endpoint (Apicurio Registry has no schema GUID lookup): a record error, not an outage.

While the registry is unavailable the record waits: its decoding is retried (full jitter,
0.5 s doubling to 10 s) for up to SCHEMA_REGISTRY_RETRY_BUDGET_S (0: forever), with a
warning when it starts, every 30 s and when the registry answers again; the wait is listed
by the status API (`schema-registry`). Nothing is dead-lettered for an outage; past the
budget, or when the flow is stopping, `RegistryUnavailableError` stops the flow with
nothing committed past the record.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit
from uuid import UUID

from flows.decode.common import (
    DecodeError,
    Decoder,
    RegistryUnavailableError,
    loads,
    not_object,
    short,
    snippet,
)
from flows.errors import ConfigError
from flows.runtime import shutdown
from sinks import failing
from sinks.backoff import Backoff

if TYPE_CHECKING:
    from flows.config import Settings
    from flows.record import Record

Deserializer: TypeAlias = Callable[[bytes, Any], Any]
"""confluent-kafka's `(data, SerializationContext) -> value`."""
Post: TypeAlias = Callable[[Any], Any] | None
"""Applied to each deserialized value (None: the value is already JSON-compatible)."""
DeserializerFactory: TypeAlias = Callable[[Any, bool], tuple[Deserializer, Post]]
"""`(client, is_value) -> (deserializer, post)`, called once on the first record; a
module-level function, so a `RegistryDecoder` pickles by reference to it. A deserializer
may also have `read_known(data, topic, headers)`: the final value (`post` applied) of a
record whose schema it already holds, or `KNOWN_MISS` for any other record, which then
takes the long way (a serialization context, the deserializer, `post`)."""
KNOWN_MISS: Any = object()
"""`read_known`'s answer for a record it leaves to the long way."""

_REGISTRY_NUMERIC_KEYS = frozenset(
    {
        "timeout",
        "cache.capacity",
        "cache.latest.ttl.sec",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
    }
)
_REGISTRY_DEFAULT_TIMEOUT_S = 30
# Schema Registry error codes that mean "no such schema/subject/version": a record problem.
_NOT_FOUND_CODES = frozenset({40401, 40402, 40403})
# The deserializers' subject naming; it only matters for data-contract rules.
DESERIALIZER_CONF = {"subject.name.strategy.type": "TOPIC"}
RETRY_BACKOFF = Backoff(initial_s=0.5, max_s=10.0)
"""The waits between tries while the registry is unavailable (the budget is the setting's)."""
WARN_EVERY_S = 30.0

logger = logging.getLogger(__name__)


def build_json_schema(settings: Settings, is_value: bool) -> Decoder:
    """The `json-schema` converter: Confluent-framed JSON validated against the writer
    schema from the Schema Registry, then parsed as `json`."""
    return RegistryDecoder(
        "json-schema",
        is_value,
        registry_conf(settings),
        _json_schema,
        settings.schema_registry_retry_budget_s,
    )


def _json_schema(client: Any, is_value: bool) -> tuple[Deserializer, Post]:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer

    deserializer = JSONDeserializer(
        None, schema_registry_client=client, conf=dict(DESERIALIZER_CONF), json_decode=loads
    )
    return deserializer, None


def schema_id_header(is_value: bool) -> str:
    """The header that names a record's schema instead of its payload's prefix."""
    return "__value_schema_id" if is_value else "__key_schema_id"


def prefix_framed(data: bytes, ctx: Any, header: str) -> bool:
    """Whether the payload's own prefix names its schema: magic byte 0, a 4-byte schema id
    and more, and no `header` (see `schema_id_header`) overriding it, as confluent-kafka's
    `dual_schema_id_deserializer` reads it. The deserializers read such records faster."""
    if len(data) <= 5 or data[0] != 0:
        return False
    headers = ctx.headers
    return not (headers and any(h[0] == header for h in headers))


def registry_conf(settings: Settings) -> dict[str, Any]:
    """The client configuration: URL, SCHEMA_REGISTRY_CONFIG with numbers as numbers."""
    url: str = settings.schema_registry_url  # type: ignore[assignment]  # checked by the caller
    for u in url.split(","):
        if not u.strip().startswith(("http://", "https://")):
            msg = "SCHEMA_REGISTRY_URL: expected http(s)://host:port URLs separated by commas"
            raise ConfigError(msg)
    conf: dict[str, Any] = {"url": url, "timeout": _REGISTRY_DEFAULT_TIMEOUT_S}
    for key, value in settings.schema_registry_config.items():
        if key == "url":
            msg = "SCHEMA_REGISTRY_CONFIG_URL: set SCHEMA_REGISTRY_URL instead"
            raise ConfigError(msg)
        if key in _REGISTRY_NUMERIC_KEYS and isinstance(value, str):
            try:
                conf[key] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
            except ValueError:
                name = "SCHEMA_REGISTRY_CONFIG_" + key.upper().replace(".", "_")
                msg = f"{name}: expected a number, got {value!r}"
                raise ConfigError(msg) from None
        else:
            conf[key] = value
    return conf


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The exceptions the registry client raises when it gets no HTTP answer."""
    from confluent_kafka.schema_registry.error import OAuthTokenError

    errors: list[type[BaseException]] = [OAuthTokenError]
    try:  # the HTTP library confluent-kafka uses: httpx2 if installed, else httpx
        httpx = importlib.import_module("httpx2")
    except ImportError:  # pragma: no cover - depends on the installed extras
        httpx = importlib.import_module("httpx")
    errors.append(httpx.TransportError)
    return tuple(errors)


def _redacted(url: str) -> str:
    """The registry URL(s) without any user:password part."""
    out = []
    for u in url.split(","):
        parts = urlsplit(u.strip())
        out.append(parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl())
    return ",".join(out)


class RegistryDecoder:
    """Decodes Confluent Schema Registry framed records (avro, json-schema, protobuf).

    The client and deserializer are created on the first call, under a lock, so building the
    decoder and pickling it never touch the network. `make` builds the deserializer from the
    client (see `DeserializerFactory`).
    """

    def __init__(
        self,
        fmt: str,
        is_value: bool,
        conf: dict[str, Any],
        make: DeserializerFactory,
        retry_budget_s: float = 0.0,
    ) -> None:
        self._fmt = fmt
        self._is_value = is_value
        self._conf = conf
        self._make = make
        self._budget_s = retry_budget_s
        """SCHEMA_REGISTRY_RETRY_BUDGET_S: how long a record waits for the registry; 0: ever."""
        self._lock = threading.Lock()
        self._deserializer: Deserializer | None = None
        self._known: Callable[[bytes, str, Any], Any] | None = None
        self._post: Post = None
        self._client: Any = None
        self._field: Any = None
        self._ctx: Callable[..., Any] | None = None
        self._registry_error: type[Exception] | None = None
        self._unavailable: tuple[type[BaseException], ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "fmt": self._fmt,
            "is_value": self._is_value,
            "conf": self._conf,
            "make": self._make,
            "budget_s": self._budget_s,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["fmt"], state["is_value"], state["conf"], state["make"], state["budget_s"]
        )

    def _start(self) -> Deserializer:
        with self._lock:
            if self._deserializer is not None:
                return self._deserializer
            from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError
            from confluent_kafka.serialization import MessageField, SerializationContext

            try:
                client = SchemaRegistryClient(self._conf)
            except (TypeError, ValueError) as e:
                msg = f"SCHEMA_REGISTRY_CONFIG: {e}"
                raise ConfigError(msg) from None
            deserializer, self._post = self._make(client, self._is_value)
            self._client = client
            self._field = MessageField.VALUE if self._is_value else MessageField.KEY
            self._ctx = SerializationContext
            self._registry_error = SchemaRegistryError
            self._unavailable = _transport_errors()
            self._known = getattr(deserializer, "read_known", None)
            self._deserializer = deserializer
            return deserializer

    def __call__(self, record: Record) -> Any:
        """Decode `record.value` (or `record.key`) through the Schema Registry.

        Args:
            record: A record whose value (or key) is not None.

        Returns:
            The decoded value, JSON-compatible; a `dict` for role value.

        Raises:
            DecodeError: The record is not valid for its schema, or its schema is unknown.
            RegistryUnavailableError: The registry did not answer usefully (not a record
                error; see flows.decode.common) for SCHEMA_REGISTRY_RETRY_BUDGET_S, or the
                flow is stopping.
        """
        deserializer = self._deserializer or self._start()
        data: bytes = record.value if self._is_value else record.key  # type: ignore[assignment]
        known = self._known
        if known is not None:
            obj = known(data, record.topic, record.headers)
            if obj is not KNOWN_MISS:
                if self._is_value and type(obj) is not dict:
                    raise not_object(data, obj, self._fmt)
                return obj
        assert self._ctx is not None
        ctx = self._ctx(record.topic, self._field, list(record.headers) or None)
        obj, error = self._decode_once(deserializer, data, ctx)
        if error is not None:
            obj = self._wait(deserializer, data, ctx, error)
        post = self._post
        if post is not None:
            obj = post(obj)
        if self._is_value and type(obj) is not dict:
            raise not_object(data, obj, self._fmt)
        return obj

    def _wait(
        self, deserializer: Deserializer, data: bytes, ctx: Any, error: RegistryUnavailableError
    ) -> Any:
        """Decode again until the registry answers (see the module docstring)."""
        budget = self._budget_s
        retries = RETRY_BACKOFF.start()
        logger.warning(
            "%s; the record waits: decoding is retried for up to %s "
            "(SCHEMA_REGISTRY_RETRY_BUDGET_S), nothing is dead-lettered for it",
            error, f"{budget:g}s" if budget else "ever",
        )  # fmt: skip
        warned = time.monotonic()
        while True:
            if budget and retries.elapsed() > budget:
                retries.over_budget()  # leaves the status API's list
                msg = (
                    f"{error}; still so after {retries.elapsed():.0f}s and {retries.count} "
                    f"retries (SCHEMA_REGISTRY_RETRY_BUDGET_S={budget:g})"
                )
                raise RegistryUnavailableError(msg)
            if failing.failing() or shutdown.requested():
                raise RegistryUnavailableError(f"{error}; the flow is stopping: no more retries")
            retries.sleep(retries.next_delay(), "schema-registry", str(error))
            obj, again = self._decode_once(deserializer, data, ctx)
            if again is not None:
                error = again
                if time.monotonic() - warned >= WARN_EVERY_S:
                    warned = time.monotonic()
                    logger.warning(
                        "%s; still retrying after %.0fs (%d retries)",
                        error, retries.elapsed(), retries.count,
                    )  # fmt: skip
                continue
            logger.warning(
                "schema registry %s answers again after %.0fs (%d retries): decoding resumes",
                _redacted(self._conf["url"]), retries.elapsed(), retries.count,
            )  # fmt: skip
            return obj

    def _decode_once(
        self, deserializer: Deserializer, data: bytes, ctx: Any
    ) -> tuple[Any, RegistryUnavailableError | None]:
        """One decode: the object, or why the registry cannot serve it now; any other
        failure raises (a dead letter)."""
        try:
            return deserializer(data, ctx), None
        except DecodeError:
            raise
        except Exception as e:
            error = self._classify(e, data)
            if not isinstance(error, RegistryUnavailableError):
                raise error from None
            return None, error

    def _classify(self, e: Exception, data: bytes) -> Exception:
        fmt = self._fmt
        schema_id = _framed_schema_id(data)
        if self._registry_error is not None and isinstance(e, self._registry_error):
            status = getattr(e, "http_status_code", None)
            code = getattr(e, "error_code", None)
            text = short(getattr(e, "error_message", "") or "")
            if code in _NOT_FOUND_CODES:
                return DecodeError(f"{fmt}: {schema_id} not in the registry: {text}")
            if status == 404 and self._answers():
                return DecodeError(
                    f"{fmt}: the registry has no endpoint to fetch {schema_id} (HTTP 404 with "
                    f"no error code; Apicurio Registry has no schema GUID lookup): {text}"
                )
            return RegistryUnavailableError(
                f"schema registry {_redacted(self._conf['url'])} answered HTTP {status} "
                f"(error code {code}) fetching {schema_id}: {text}"
            )
        if isinstance(e, self._unavailable):
            return RegistryUnavailableError(
                f"schema registry {_redacted(self._conf['url'])} unreachable fetching "
                f"{schema_id}: {type(e).__name__}: {short(str(e))}"
            )
        return DecodeError(
            f"{fmt}: cannot decode record ({schema_id}): "
            f"{type(e).__name__}: {short(str(e))}; payload starts {snippet(data)}"
        )

    def _answers(self) -> bool:
        """Whether the registry answers at all (`GET /schemas/types`)."""
        try:
            self._client.get_schema_types()
        except Exception:
            return False
        return True


def _framed_schema_id(data: bytes) -> str:
    """`schema id N`, `schema guid G`, the bad magic byte or the empty payload, for messages."""
    if not data:
        return "empty payload"
    if data[0] == 0 and len(data) >= 5:
        return f"schema id {int.from_bytes(data[1:5], 'big')}"
    if data[0] == 1 and len(data) >= 17:
        return f"schema guid {UUID(bytes=bytes(data[1:17]))}"
    return f"magic byte {data[0]}, expected 0"
