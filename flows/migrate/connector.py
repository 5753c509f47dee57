"""A Kafka Connect connector's configuration, read from where operators keep it: the JSON
posted to a worker's `/connectors` (with or without the `{"name", "config"}` wrapper), a
`.properties` file (standalone mode), or a running worker's REST API (`GET
/connectors/<name>/config`). Values are kept as the text Kafka Connect reads."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.errors import ConfigError

REST_TIMEOUT_S = 10.0

SECRET = re.compile(
    r"password|secret|user\.info|jaas|token|credential|\.key$|keystore\.key|certificate\.chain",
    re.IGNORECASE,
)
"""Options whose values are credentials: never printed, only named."""


def is_secret(option: str) -> bool:
    return SECRET.search(option) is not None


@dataclass
class Connector:
    """One connector's configuration: option -> text, as Kafka Connect reads it."""

    name: str | None
    config: dict[str, str]
    origin: str
    """Where it was read (a path, `stdin`, or `<url>/connectors/<name>`), for messages."""
    worker: dict[str, str] = field(default_factory=dict)
    """The worker's configuration (`--worker-config`): the converters and `consumer.*`
    settings a connector inherits when it does not set its own."""

    def get(self, option: str, default: str | None = None) -> str | None:
        return self.config.get(option, default)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


def from_json(data: Any, origin: str) -> Connector:
    """`{"name": ..., "config": {...}}` (POST /connectors) or the bare config (PUT
    /connectors/<name>/config, GET .../config)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a JSON object, got {type(data).__name__}")
    wrapped = data.get("config")
    body: dict[str, Any] = wrapped if isinstance(wrapped, dict) else data
    config = {str(k): _text(v) for k, v in body.items()}
    name = data.get("name") if body is not data else None
    name = str(name or config.get("name") or "") or None
    return Connector(name, config, origin)


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties' format: `key=value`, `key: value` or `key value`; `#` and `!`
    comments; a line ending in an odd number of backslashes continues; `\\uXXXX` and the
    usual escapes."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        key, value = _split(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    j, n = 0, len(line)
    while j < n:
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=: \t\f":
            break
        j += 1
    rest = line[j:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return line[:j], rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, j = [], 0
    while j < len(text):
        c = text[j]
        if c != "\\" or j + 1 == len(text):
            out.append(c)
            j += 1
            continue
        nxt = text[j + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[j + 2 : j + 6]):
            out.append(chr(int(text[j + 2 : j + 6], 16)))
            j += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        j += 2
    return "".join(out)


def read_file(path: str, text: str | None = None) -> Connector:
    """A connector from a JSON or `.properties` file (`-`: standard input, `text`)."""
    origin = "stdin" if path == "-" else path
    if text is None:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError(f"SOURCE: cannot read {path}: {e.strerror}") from None
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return from_json(json.loads(text), origin)
        except ValueError as e:
            raise ConfigError(f"SOURCE: {origin} is not valid JSON: {e}") from None
    config = parse_properties(text)
    if not config:
        raise ConfigError(f"SOURCE: {origin} holds no connector options")
    return Connector(config.get("name") or None, config, origin)


def read_worker(path: str) -> dict[str, str]:
    """A worker's `.properties` (connect-distributed.properties, connect-standalone...)."""
    try:
        return parse_properties(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"--worker-config: cannot read {path}: {e.strerror}") from None


def read_rest(url: str, name: str, timeout: float = REST_TIMEOUT_S) -> Connector:
    """`GET <url>/connectors/<name>/config` of a running worker; `user:password@` in the
    URL is sent as basic authentication, never printed."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"--connect-url: expected http(s)://host:port, got {masked_url(url, drop=True)!r}"
        )
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    target = f"{base}/connectors/{urllib.parse.quote(name, safe='')}/config"
    request = urllib.request.Request(target, headers={"Accept": "application/json"})  # noqa: S310 (http or https, checked above)
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            data = json.loads(response.read())
    except urllib.error.HTTPError as e:
        detail = _message(e.read())
        if e.code == 404:
            raise ConfigError(f"--connector: {base} has no connector {name!r}{detail}") from None
        msg = f"--connect-url: {target} answered HTTP {e.code}{detail}"
        raise ConfigError(msg) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ConfigError(f"--connect-url: cannot reach {base}: {reason}") from None
    except ValueError:
        raise ConfigError(f"--connect-url: {target} did not answer JSON") from None
    connector = from_json(data, f"{base}/connectors/{name}")
    connector.name = connector.name or name
    return connector


def _message(body: bytes) -> str:
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        return ""
    return f": {message}" if message else ""


_USERINFO = re.compile(
    r"^(?P<scheme>[a-z][a-z0-9+.-]*://)?(?P<user>[^/@:\s]*)(?::[^/@\s]*)?@", re.I
)
"""A URL's credentials (`user:password@`), with or without a scheme; parsing is not needed,
so a URL `urllib` refuses (`http://u:p@[es`) is masked all the same."""


def masked_url(url: str, drop: bool = False) -> str:
    """`url` with its password as `***` (or, `drop`, without credentials)."""
    url = url.strip()
    m = _USERINFO.match(url)
    if m is None:
        return url
    creds = "" if drop else f"{m['user']}:***@"
    return f"{m['scheme'] or ''}{creds}{url[m.end() :]}"
