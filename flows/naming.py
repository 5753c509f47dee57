"""Index name patterns live with the sink that renders them
(`sinks.elasticsearch.index_names.IndexName`); `IndexTemplate` is the old name."""

from __future__ import annotations

from sinks.elasticsearch.index_names import IndexName

IndexTemplate = IndexName

__all__ = ["IndexName", "IndexTemplate"]
