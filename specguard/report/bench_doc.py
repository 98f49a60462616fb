"""The bench file (`specguard bench --json FILE`) as a document: checked against its model
before it is written, and on load (store/documents.py)."""

from __future__ import annotations

from typing import Final, Literal

from specguard.report.schema import BenchDoc
from specguard.store.documents import Document

BENCH_SCHEMA: Final[Literal["specguard-bench"]] = "specguard-bench"
BENCH_VERSION = 1

BENCH: Document[BenchDoc] = Document(BENCH_SCHEMA, BENCH_VERSION, BenchDoc, what="bench file",
                                     make="write one with: specguard bench --url URL --json FILE")
