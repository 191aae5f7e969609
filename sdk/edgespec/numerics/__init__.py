"""Numerics for low precision: float formats, pre-normalizer theory, stable norm layers."""

SEARCH_REPORT_JSON = "normsearch.json"  # the search's report; in a bundle: edgespec.manifest.LAYOUT.normsearch_json
