"""Elasticsearch look-ups for checks: document counts and every document of an index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


def count_docs(es: Elasticsearch, index: str) -> int:
    """Documents in `index` after a refresh (0 if it does not exist yet)."""
    if not es.indices.exists(index=index):
        return 0
    es.indices.refresh(index=index)
    return int(es.count(index=index)["count"])


def hits_by_id(
    es: Elasticsearch,
    index: str,
    *,
    source: bool | list[str] = True,
    version: bool = False,
    missing_ok: bool = False,
) -> dict[str, dict[str, Any]]:
    """Every hit of `index` (after a refresh) by id: `_source` (all, none or the listed
    fields), `_routing` and, with `version`, `_version`. A missing index is {} with
    `missing_ok`, else NotFoundError."""
    from elasticsearch.helpers import scan

    if missing_ok and not es.indices.exists(index=index):
        return {}
    es.indices.refresh(index=index)
    query: dict[str, Any] = {"query": {"match_all": {}}, "_source": source}
    return {h["_id"]: h for h in scan(es, index=index, query=query, size=5000, version=version)}


def search_all(es: Elasticsearch, index: str) -> dict[str, dict[str, Any]]:
    """Every document's `_source` in `index` (after a refresh), by id."""
    return {i: h["_source"] for i, h in hits_by_id(es, index).items()}
