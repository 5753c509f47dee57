"""flows.decode: build_decoder and the CONVERTERS registry (build-time checks)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from flows.decode import CONVERTERS, REGISTRY_FORMATS, build_decoder
from flows.errors import ConfigError
from tests.support.decode import (
    key_decoder,
    settings,
    value_decoder,
)
from tests.support.paths import ROOT

# -- build-time checks


def test_protobuf_builds_without_touching_the_registry() -> None:
    # Nothing listens on port 1: building must not connect (the client starts on first use).
    assert callable(value_decoder("protobuf", SCHEMA_REGISTRY_URL="http://127.0.0.1:1"))
    assert callable(key_decoder("protobuf", SCHEMA_REGISTRY_URL="http://127.0.0.1:1"))
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_URL"):
        value_decoder("protobuf")


def test_bad_role() -> None:
    with pytest.raises(ValueError, match="role"):
        build_decoder(settings(), "header")  # type: ignore[arg-type]


def test_registry_numeric_settings_checked_at_build() -> None:
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_CONFIG_MAX_RETRIES"):
        value_decoder(
            "avro",
            SCHEMA_REGISTRY_URL="http://127.0.0.1:1",
            SCHEMA_REGISTRY_CONFIG_MAX_RETRIES="many",
        )


# -- the registry: the only list of formats, and the docs'


DOCS = ROOT / "docs"


def _setting_note(name: str) -> str:
    """The notes on `name` in docs/configuration.md (under its heading ``### `NAME` ``)."""
    text = (DOCS / "configuration.md").read_text()
    m = re.search(rf"^### `{name}`\n(.*?)(?=^#)", text, re.M | re.S)
    assert m, f"docs/configuration.md has no notes on {name}"
    return m.group(1)


def test_docs_format_choices_are_the_converters() -> None:
    assert re.findall(r"`([^`]+)`", _setting_note("VALUE_FORMAT")) == list(CONVERTERS)
    key_formats = _setting_note("KEY_FORMAT")
    assert "the same choices" in key_formats or (
        re.findall(r"`([^`]+)`", key_formats) == list(CONVERTERS)
    )
    needs = re.findall(r"`([^`]+)`", _setting_note("SCHEMA_REGISTRY_URL"))
    assert needs == list(REGISTRY_FORMATS) == [n for n, c in CONVERTERS.items() if c.needs_registry]
    # docs/converters.md: one bullet per converter (or per pair), in the same order.
    text = (DOCS / "converters.md").read_text()
    bullets = re.findall(r"^- ((?:`[^`]+`(?:, )?)+):", text, re.M)
    listed = [name for b in bullets for name in re.findall(r"`([^`]+)`", b)]
    assert listed == list(CONVERTERS)


def _fake_settings(fmt: str, url: str | None = "http://127.0.0.1:1") -> Any:
    # build_decoder reads only these; a namespace also lets a format the config refuses through.
    return SimpleNamespace(
        value_format=fmt,
        key_format=fmt,
        value_field="message",
        schema_registry_url=url,
        schema_registry_config={},
        schema_registry_retry_budget_s=300.0,
    )


@pytest.mark.parametrize("fmt", list(CONVERTERS))
@pytest.mark.parametrize("role", ["value", "key"])
def test_every_converter_builds_without_io(fmt: str, role: Any) -> None:
    # Port 1: nothing listens, so a builder that connected would fail here.
    assert callable(build_decoder(_fake_settings(fmt), role))
    if CONVERTERS[fmt].needs_registry:
        with pytest.raises(ConfigError, match=f"^SCHEMA_REGISTRY_URL: required when .*={fmt}$"):
            build_decoder(_fake_settings(fmt, url=None), role)
    else:
        assert callable(build_decoder(_fake_settings(fmt, url=None), role))


def test_unknown_format_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"^VALUE_FORMAT: unknown format 'xml'$"):
        build_decoder(_fake_settings("xml"), "value")
    with pytest.raises(ConfigError, match=r"^KEY_FORMAT: unknown format 'xml'$"):
        build_decoder(_fake_settings("xml"), "key")


def test_decode_errors_keep_their_public_class_name() -> None:
    # Dead letters carry `exception.class.name`; pickle finds the class by the same name.
    from flows.decode import DecodeError, RegistryUnavailableError

    for cls in (DecodeError, RegistryUnavailableError):
        assert f"{cls.__module__}.{cls.__qualname__}" == f"flows.decode.{cls.__name__}"
