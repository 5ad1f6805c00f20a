"""Export of selected documents to Parquet, JSONL or CSV, one record batch at a time.

Exports are written by Python from the query's Arrow batches, not by DuckDB's ``COPY``,
so the SQL sandbox never needs write access to any file. They go to a hidden temporary
file that is renamed into place only once the query has run to its end: a query that
fails part-way, runs out of time or is interrupted leaves neither output nor partial file.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from sparsegnn.curation.curation_errors import QueryError
from sparsegnn.curation.document_store import refuse_overwrite
from sparsegnn.data.io import atomic_write
from sparsegnn.optional import require


def export(batches: Iterable[Any], path: str | Path, protected: Iterable[Path] = ()) -> int:
    """Write ``pyarrow.RecordBatch`` es to ``.parquet``, ``.jsonl`` or ``.csv``; returns the
    row count.

    ``protected`` are the query's inputs, which the output must not replace."""
    path = Path(path)
    if path.suffix not in _WRITERS:
        raise QueryError(f"{path}: export to .parquet, .jsonl or .csv, got "
                         f"{path.suffix or 'no suffix'}")
    if path.is_dir():
        raise QueryError(f"{path}: is a directory; name a .parquet, .jsonl or .csv file")
    refuse_overwrite(path, *protected)
    fill = _WRITERS[path.suffix]
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
            writer = writer or pq.ParquetWriter(f, _parquet_schema(batch.schema))
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


def _parquet_schema(schema: Any) -> Any:
    """``schema``, or a QueryError naming its UNION columns, which Parquet has no type for
    (pyarrow would stop with an error of its own, mid-export)."""
    pa = require("pyarrow")

    def has_union(kind: Any) -> bool:
        return pa.types.is_union(kind) or any(has_union(kind.field(i).type)
                                              for i in range(kind.num_fields))

    unions = [f.name for f in schema if has_union(f.type)]
    if unions:
        raise QueryError(f"{', '.join(unions)}: a UNION column, which Parquet cannot hold; "
                         f"export CSV or JSON, or CAST({unions[0]} AS VARCHAR) in the query")
    return schema


def _jsonl(batches: Iterable[Any], f: BinaryIO) -> int:
    rows = 0
    for batch in batches:
        f.writelines((json.dumps(r, default=str) + "\n").encode() for r in batch.to_pylist())
        rows += batch.num_rows
    return rows


def _csv(batches: Iterable[Any], f: BinaryIO) -> int:
    """CSV for spreadsheets: struct columns flattened into one column per leaf
    (``eai_taxonomy.reasoning_depth.primary.code``), lists written as JSON text. Cells are
    written as they are (a code ``-1`` stays ``-1``), so a spreadsheet may read a text
    starting with ``=`` as a formula: open untrusted exports as text."""
    pa = require("pyarrow")
    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    writer, rows, header = csv.writer(text), 0, True
    for batch in batches:
        table = pa.Table.from_batches([batch])
        while any(pa.types.is_struct(t) for t in table.schema.types):
            table = table.flatten()
        if header:
            writer.writerow(table.column_names)
            header = False
        columns = [[_csv_value(v) for v in column.to_pylist()] for column in table.columns]
        writer.writerows(zip(*columns, strict=True))
        rows += batch.num_rows
    text.detach()  # flushes; ``f`` stays open for the atomic rename
    return rows


def _csv_value(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, default=str, ensure_ascii=False)
    return "" if value is None else value


_WRITERS = {".parquet": _parquet, ".jsonl": _jsonl, ".csv": _csv}
