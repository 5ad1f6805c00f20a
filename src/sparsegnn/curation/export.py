"""Export of selected documents to Parquet or JSONL, one record batch at a time.

Exports are written by Python from the query's Arrow batches, not by DuckDB's ``COPY``,
so the SQL sandbox never needs write access to any file. They go to a hidden temporary
file that is renamed into place only once the query has run to its end: a query that
fails part-way, runs out of time or is interrupted leaves neither output nor partial file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from sparsegnn.curation.errors import QueryError
from sparsegnn.curation.store import refuse_overwrite
from sparsegnn.data.io import atomic_write
from sparsegnn.optional import require


def export(batches: Iterable[Any], path: str | Path, protected: Iterable[Path] = ()) -> int:
    """Write ``pyarrow.RecordBatch`` es to ``.parquet`` or ``.jsonl``; returns the row count.

    ``protected`` are the query's inputs, which the output must not replace."""
    path = Path(path)
    if path.suffix not in (".parquet", ".jsonl"):
        raise QueryError(f"{path}: export to .parquet or .jsonl, got {path.suffix or 'no suffix'}")
    if path.is_dir():
        raise QueryError(f"{path}: is a directory; name a .parquet or .jsonl file")
    refuse_overwrite(path, *protected)
    fill = _parquet if path.suffix == ".parquet" else _jsonl
    rows = 0

    def write(f: BinaryIO) -> None:
        nonlocal rows
        rows = fill(batches, f)

    atomic_write(path, write)
    return rows


def _parquet(batches: Iterable[Any], f: BinaryIO) -> int:
    pq = require("pyarrow.parquet")
    writer, rows = None, 0
    try:
        for batch in batches:
            writer = writer or pq.ParquetWriter(f, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        # Closed here, while the file is still open: a writer left to the garbage
        # collector after a failed query would print a traceback from ``__del__``.
        if writer is not None:
            writer.close()
    if writer is None:
        raise QueryError("the query returned no batches; nothing to export")
    return rows


def _jsonl(batches: Iterable[Any], f: BinaryIO) -> int:
    rows = 0
    for batch in batches:
        f.writelines((json.dumps(r, default=str) + "\n").encode() for r in batch.to_pylist())
        rows += batch.num_rows
    return rows
