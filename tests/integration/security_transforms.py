"""Transforms for tests/integration/test_security.py, imported by the flow subprocess
(`TRANSFORMS=tests.integration.security_transforms:leak_settings`)."""

from __future__ import annotations

import os

from flows.record import Doc

# The settings a careless transform might paste into an error message.
SECRET_SETTINGS = ("ES_PASSWORD", "ES_API_KEY", "ES_BEARER_TOKEN", "KAFKA_CONFIG_SASL_PASSWORD")


def leak_settings(doc: Doc) -> Doc:
    """A buggy transform: for a body with `"leak": true` it raises a ValueError whose message
    quotes every secret setting of the process, as a careless `f"...{config}..."` would."""
    if doc.source is not None and doc.source.get("leak"):
        quoted = ", ".join(
            f"{name}={os.environ[name]}" for name in SECRET_SETTINGS if os.environ.get(name)
        )
        msg = f"enrichment lookup failed for record {doc.key!r} with settings {quoted}"
        raise ValueError(msg)
    return doc
