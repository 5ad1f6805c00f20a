"""Export of selected documents to Parquet or JSONL, one record batch at a time.

Exports are written by Python from the query's Arrow batches, not by DuckDB's ``COPY``,
so the SQL sandbox never needs write access to any file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparsegnn.curation._optional import require
from sparsegnn.curation.errors import QueryError


def export(batches: Iterable[Any], path: str | Path) -> int:
    """Write ``pyarrow.RecordBatch`` es to ``.parquet`` or ``.jsonl``; returns the row count."""
    path = Path(path)
    if path.suffix not in (".parquet", ".jsonl"):
        raise QueryError(f"{path}: export to .parquet or .jsonl, got {path.suffix or 'no suffix'}")
    tmp = path.with_name(path.name + ".partial")
    rows = 0
    if path.suffix == ".parquet":
        pq = require("pyarrow.parquet")
        writer = None
        for batch in batches:
            writer = writer or pq.ParquetWriter(tmp, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is None:
            raise QueryError("the query returned no batches; nothing to export")
        writer.close()
    else:
        with tmp.open("w", encoding="utf-8") as fh:
            for batch in batches:
                fh.writelines(json.dumps(r, default=str) + "\n" for r in batch.to_pylist())
                rows += batch.num_rows
    tmp.replace(path)
    return rows
