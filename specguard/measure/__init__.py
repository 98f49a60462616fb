"""Measuring: HTTP client, SSE parsing, load generation, per-run metrics, one cell's sweep."""
