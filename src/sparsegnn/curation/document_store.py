"""The document store's layout, and the fingerprints that tie its files together.

A store folder holds ``documents.parquet`` (written by ingest), ``graph.npz`` (ingest,
written last) and ``annotations.parquet`` (annotate). Each is written to a temporary
file and renamed into place, but a crash between two renames, or re-ingesting other
documents into the same folder, could still pair files of different runs: a graph whose
rows are not the documents' rows (distil then fails deep inside SpMM, or silently
propagates over the wrong edges), or old annotations joined to new texts.

So ingest hashes the documents it writes (id, text, url, links, in order) into a
fingerprint stored in ``documents.parquet``'s footer, and the graph and the annotations
record the fingerprint of the documents they were built from. Readers compare them
(footers only, no data pass) and refuse a mismatch with one line saying what to rerun.
Re-ingesting identical documents gives the identical fingerprint, so their annotations
stay valid. Documents without a fingerprint (hand-made Parquet files) cannot be checked
and are taken as they are.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sparsegnn.errors import DataFormatError
from sparsegnn.optional import require

DOCUMENTS_FILE = "documents.parquet"
GRAPH_FILE = "graph.npz"
ANNOTATIONS_FILE = "annotations.parquet"
FINGERPRINT_KEY = "sparsegnn.fingerprint"
DOCUMENTS_FINGERPRINT_KEY = "sparsegnn.documents_fingerprint"


def parquet_metadata(path: Path, key: str) -> str | None:
    """One key of a Parquet file's footer metadata (None if absent)."""
    pq = require("pyarrow.parquet")
    if not path.is_file():
        raise DataFormatError(f"{path}: no such file; run `sparsegnn curate ingest` first")
    try:
        meta = pq.read_metadata(path).metadata or {}
    except (OSError, ValueError) as err:
        raise DataFormatError(f"{path}: not a readable Parquet file ({err})") from None
    value = meta.get(key.encode())
    return None if value is None else value.decode("utf-8", "replace")


def parquet_rows(path: Path) -> int:
    """Rows of a Parquet file, from its footer."""
    pq = require("pyarrow.parquet")
    try:
        return int(pq.read_metadata(path).num_rows)
    except (OSError, ValueError) as err:
        raise DataFormatError(f"{path}: not a readable Parquet file ({err})") from None


def graph_fingerprint(path: Path) -> tuple[int, str | None]:
    """``(num_nodes, documents fingerprint)`` of a ``graph.npz`` (fingerprint None if absent)."""
    if not path.is_file():
        raise DataFormatError(f"{path}: graph file is missing; run `sparsegnn curate ingest`")
    try:
        with np.load(path, allow_pickle=False) as z:
            n = int(z["num_nodes"])
            fp = str(z["documents_fingerprint"]) if "documents_fingerprint" in z else None
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise DataFormatError(f"{path}: not a graph written by `curate ingest` ({err})") from None
    return n, fp


def check_store(store_dir: str | Path) -> None:
    """The graph was built from these very documents (same fingerprint and row count)."""
    store_dir = Path(store_dir)
    documents, graph = store_dir / DOCUMENTS_FILE, store_dir / GRAPH_FILE
    doc_fp = parquet_metadata(documents, FINGERPRINT_KEY)
    rows = parquet_rows(documents)
    n, graph_fp = graph_fingerprint(graph)
    if n != rows or (doc_fp is not None and graph_fp != doc_fp):
        raise DataFormatError(
            f"{graph}: built for other documents than {documents} ({n} nodes, fingerprint "
            f"{_short(graph_fp)}; the documents have {rows} rows, fingerprint "
            f"{_short(doc_fp)}); an ingest was interrupted or mixed: rerun `sparsegnn curate "
            "ingest`")


def check_annotations(documents: Path, annotations: Path) -> None:
    """``annotations`` were made for ``documents`` as they are now (not before a re-ingest)."""
    doc_fp = parquet_metadata(documents, FINGERPRINT_KEY)
    if doc_fp is None:
        return
    ann_fp = parquet_metadata(annotations, DOCUMENTS_FINGERPRINT_KEY)
    if ann_fp != doc_fp:
        raise DataFormatError(
            f"{annotations}: annotates other documents than {documents} (fingerprint "
            f"{_short(ann_fp)} vs {_short(doc_fp)}); the corpus changed since: rerun "
            "`sparsegnn curate annotate`")


def refuse_overwrite(out: str | Path, *protected: str | Path) -> None:
    """Refuse an output that is one of the ``protected`` inputs, however it is spelled
    (relative, ``..``, a symlink or a hard link to it)."""
    out = Path(out)
    for path in map(Path, protected):
        if not path.exists():
            continue
        same = out.resolve() == path.resolve() or (out.exists() and os.path.samefile(out, path))
        if same:
            raise DataFormatError(f"{out}: is the input {path}; writing there would destroy "
                                  "it, choose another output")


def _short(fingerprint: str | None) -> str:
    return "none" if fingerprint is None else fingerprint[:12]
