"""Ingest: documents from JSONL or Parquet into a Parquet document store and a graph.

Everything streams in batches of ``batch_rows`` documents (one Parquet row group each),
so the text of a corpus larger than memory never sits in memory at once; what grows with
the corpus is the id index (to find duplicates and resolve links) and the edge arrays.
Bad input is an error that names the file and row, never a silently dropped row:
missing or empty ids, repeated ids, texts that are empty or not strings, links and URLs
of the wrong type and bytes that are not UTF-8 are all refused.

The store is written whole or not at all: documents and graph go to hidden temporary
files beside their final names and are renamed into place only after both are complete,
the graph last. The graph records the fingerprint of the documents it was built from
(see :mod:`sparsegnn.curation.document_store`), so a crash between the two renames, or an older
graph beside newer documents, is refused by every reader instead of being used.

The document graph has three kinds of edges: explicit links (``links``: ids of other
documents; links that leave the corpus are counted and dropped), same-site edges (each
document linked to the ``site_neighbors`` previous documents of its URL's host) and,
optionally, k-nearest-neighbour edges on TF-IDF features (exact and quadratic in the
corpus size: for corpora up to some ten thousand documents).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice, repeat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import scipy.sparse as sp

from sparsegnn.curation.document_store import DOCUMENTS_FILE, FINGERPRINT_KEY, GRAPH_FILE
from sparsegnn.data.io import remove_empty
from sparsegnn.data.leftovers import pid_temp_prefix, sweep_temp_files
from sparsegnn.data.text import HashedTfidf
from sparsegnn.data.write_errors import named_for
from sparsegnn.errors import DataFormatError
from sparsegnn.optional import require

EDGE_KINDS = ("link", "site", "knn")
_MAX_REPORTED = 5


@dataclass
class IngestConfig:
    """How to build the store and the graph."""

    batch_rows: int = 8192
    site_neighbors: int = 2
    knn: int = 0
    knn_features: int = 2**12


@dataclass
class IngestReport:
    """What an ingest wrote, for the CLI's summary and JSON."""

    num_documents: int
    edges: dict[str, int]
    dangling_links: int
    documents_file: str
    graph_file: str


def _document_schema() -> Any:
    pa = require("pyarrow")
    return pa.schema([("id", pa.string()), ("text", pa.string()), ("url", pa.string()),
                      ("site", pa.string()), ("links", pa.list_(pa.string()))])


def read_batches(path: str | Path, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    """Rows of a ``.jsonl`` or ``.parquet`` file, ``batch_rows`` at a time."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: input file is missing")
    if path.suffix == ".parquet":
        yield from _parquet_batches(path, batch_rows)
        return
    with path.open("rb") as fh:
        lines = enumerate(fh, start=1)
        while chunk := list(islice(lines, batch_rows)):
            yield [_json_row(path, n, line) for n, line in chunk if line.strip()]


def _parquet_batches(path: Path, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    pq = require("pyarrow.parquet")
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=batch_rows)
        for batch in batches:
            yield batch.to_pylist()
    except (OSError, ValueError) as err:  # ArrowInvalid is a ValueError
        raise DataFormatError(f"{path}: not a readable Parquet file ({err})") from None


def _json_row(path: Path, lineno: int, raw: bytes) -> dict[str, Any]:
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}:{lineno}: not valid UTF-8 (byte {err.start} of the "
                              f"line is {raw[err.start]:#04x})") from None
    except json.JSONDecodeError as err:
        raise DataFormatError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise DataFormatError(f"{path}:{lineno}: expected a JSON object per line")
    return row


def site_of(url: str | None) -> str | None:
    """The host of a URL, lower-cased, without ``www.``; None when there is none."""
    if not url:
        return None
    host = urlsplit(url if "//" in url else "//" + url).hostname
    return host.removeprefix("www.") if host else None


class _Validator:
    """Checks rows as they stream past and remembers every id (for duplicates and links)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.row_of: dict[str, int] = {}
        self.problems: list[str] = []
        self.num_bad = 0

    def check(self, rows: list[dict[str, Any]], start: int) -> None:
        for offset, row in enumerate(rows):
            n = start + offset
            problem = self._problem(row)
            if problem is None:
                self.row_of[str(row["id"])] = n
                continue
            self.num_bad += 1
            if len(self.problems) < _MAX_REPORTED:
                self.problems.append(f"row {n}: {problem}")

    def _problem(self, row: dict[str, Any]) -> str | None:
        """What is wrong with one row (the first thing found), or None."""
        doc_id, text = row.get("id"), row.get("text")
        if doc_id is None or str(doc_id).strip() == "":
            return "missing id"
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
            return f"id must be a string or an integer, got {_json_type(doc_id)}"
        if str(doc_id) in self.row_of:
            return f"duplicate id {str(doc_id)!r} (first at row {self.row_of[str(doc_id)]})"
        if text is not None and not isinstance(text, str):
            return f"text for id {str(doc_id)!r} must be a string, got {_json_type(text)}"
        if text is None or not text.strip():
            return f"empty text for id {str(doc_id)!r}"
        url, links = row.get("url"), row.get("links")
        if url is not None and not isinstance(url, str):
            return f"url for id {str(doc_id)!r} must be a string, got {_json_type(url)}"
        if links is not None and not isinstance(links, str) and not (
                isinstance(links, list) and all(_is_id(x) for x in links)):
            return (f"links for id {str(doc_id)!r} must be a list of ids, got "
                    f"{_json_type(links)}")
        return None

    def raise_if_bad(self) -> None:
        if self.num_bad:
            hidden = self.num_bad - len(self.problems)
            more = f" (and {hidden} more)" if hidden else ""
            raise DataFormatError(
                f"{self.path}: {self.num_bad} bad rows, nothing was ingested; fix them and "
                f"rerun: {'; '.join(self.problems)}{more}")


def _json_type(value: object) -> str:
    """A value's type in the words of JSON (what the user wrote), not Python's."""
    if isinstance(value, bool):
        return f"a boolean ({value})"
    names = {dict: "an object", list: "an array", str: "a string", int: "a number",
             float: "a number"}
    return next((f"{name} ({value!r:.40})" for kind, name in names.items()
                 if isinstance(value, kind)), type(value).__name__)


def _is_id(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def ingest(
    source: str | Path, out_dir: str | Path, cfg: IngestConfig | None = None
) -> IngestReport:
    """Write ``documents.parquet`` and ``graph.npz`` for the corpus in ``source``.

    Both appear together or not at all; on any error the folder is left as it was (a
    folder made for it is removed again), a full disk is one
    :class:`~sparsegnn.errors.DiskFullError` naming ``out_dir``, and a success removes
    the temporary files that killed ingests left there (:func:`sweep_temp_files`)."""
    cfg = cfg or IngestConfig()
    source, out = Path(source), Path(out_dir)
    store, graph = out / DOCUMENTS_FILE, out / GRAPH_FILE
    with _made_folder(out), named_for(out, store, graph), _temp_beside(store) as docs_tmp, \
            _temp_beside(graph) as graph_tmp, named_for(out, temps=(docs_tmp, graph_tmp)):
        n, fingerprint, row_of, site_edges = _write_documents(source, docs_tmp, cfg)
        link_src, link_dst, dangling = _link_edges(docs_tmp, row_of, cfg.batch_rows)
        kinds = {"link": (link_src, link_dst), "site": site_edges.arrays()}
        if cfg.knn > 0:
            kinds["knn"] = knn_edges(store_features(docs_tmp, cfg.knn_features,
                                                    cfg.batch_rows), cfg.knn)
        save_graph_edges(graph_tmp, n, kinds, fingerprint)
        os.replace(docs_tmp, store)
        os.replace(graph_tmp, graph)  # last: until now readers see a mismatched graph
    sweep_temp_files(out, (DOCUMENTS_FILE, GRAPH_FILE))
    return IngestReport(n, {k: int(v[0].size) for k, v in kinds.items()}, dangling,
                        str(store), str(graph))


@contextmanager
def _made_folder(out: Path) -> Iterator[None]:
    """``out`` (and its parents) created for the block, and removed again if the block
    fails and they are still empty: a failed ingest leaves no empty store behind."""
    absolute = out.absolute()
    made = [p for p in (absolute, *absolute.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        yield
    except BaseException:
        remove_empty(made)
        raise


@contextmanager
def _temp_beside(path: Path) -> Iterator[Path]:
    """A hidden temporary file name beside ``path`` (this pid in it, see
    :func:`pid_temp_prefix`), removed on the way out unless it was renamed into place."""
    fd, name = tempfile.mkstemp(prefix=pid_temp_prefix(path.name), suffix=".tmp",
                                dir=path.parent)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def _write_documents(source: Path, dest: Path, cfg: IngestConfig
                     ) -> tuple[int, str, dict[str, int], _SiteEdges]:
    """Validate and write every document to ``dest``; returns the count, the documents'
    fingerprint, the row of each id and the same-site edges."""
    pa, pq = require("pyarrow"), require("pyarrow.parquet")
    validator = _Validator(source)
    site_edges = _SiteEdges(cfg.site_neighbors)
    digest = hashlib.sha256()
    n = 0
    with pq.ParquetWriter(dest, _document_schema()) as writer:
        for rows in read_batches(source, cfg.batch_rows):
            validator.check(rows, n)
            n += len(rows)
            if validator.num_bad:
                continue  # keep scanning to report every problem, write nothing more
            records = [_normalise(r) for r in rows]
            for r in records:
                digest.update(json.dumps([r["id"], r["text"], r["url"], r["links"]]).encode())
            site_edges.add([r["site"] for r in records], n - len(rows))
            writer.write_batch(pa.RecordBatch.from_pylist(records, schema=_document_schema()))
        validator.raise_if_bad()
        if n == 0:
            raise DataFormatError(f"{source}: no documents found")
        fingerprint = digest.hexdigest()
        writer.add_key_value_metadata({FINGERPRINT_KEY: fingerprint})
    return n, fingerprint, validator.row_of, site_edges


def _normalise(row: dict[str, Any]) -> dict[str, Any]:
    url = row.get("url")
    links = row.get("links") or []
    if isinstance(links, str):
        links = [links]
    return {"id": str(row["id"]), "text": row["text"], "url": url,
            "site": site_of(url), "links": [str(x) for x in links]}


class _SiteEdges:
    """Edges from each document to the previous ``k`` documents of the same site."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.recent: dict[str, deque[int]] = defaultdict(lambda: deque(maxlen=max(k, 1)))
        self.src: list[int] = []
        self.dst: list[int] = []

    def add(self, sites: list[str | None], start: int) -> None:
        if self.k <= 0:
            return
        for offset, site in enumerate(sites):
            if site is None:
                continue
            row = start + offset
            previous = self.recent[site]
            self.src.extend(previous)
            self.dst.extend([row] * len(previous))
            previous.append(row)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.src, dtype=np.int64), np.asarray(self.dst, dtype=np.int64)


def _link_edges(store: Path, row_of: dict[str, int], batch_rows: int
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """Resolve the stored ``links`` columns to row numbers (a second streaming pass).

    Works a batch at a time on the flattened list column, so the edge arrays grow by one
    pair of arrays per batch rather than per document (a million tiny arrays would cost
    more memory and time than the edges they hold)."""
    pc, pq = require("pyarrow.compute"), require("pyarrow.parquet")
    src: list[np.ndarray] = [np.zeros(0, np.int64)]
    dst: list[np.ndarray] = [np.zeros(0, np.int64)]
    dangling = 0
    row = 0
    for batch in pq.ParquetFile(store).iter_batches(batch_size=batch_rows, columns=["links"]):
        links = batch.column(0)
        flat = pc.list_flatten(links).to_pylist()
        targets = np.fromiter(map(row_of.get, flat, repeat(-1)), dtype=np.int64,
                              count=len(flat))
        hit = targets >= 0
        dangling += int(hit.size - hit.sum())
        parents = pc.list_parent_indices(links).to_numpy(zero_copy_only=False)
        src.append(row + parents.astype(np.int64)[hit])
        dst.append(targets[hit])
        row += len(links)
    return np.concatenate(src), np.concatenate(dst), dangling


def iter_texts(store: str | Path, batch_rows: int,
               row_groups: list[int] | None = None) -> Iterator[list[str]]:
    """Texts of the document store (or of its ``row_groups``), one list per batch."""
    return _iter_column(store, "text", batch_rows, row_groups)


def iter_ids(store: str | Path, batch_rows: int,
             row_groups: list[int] | None = None) -> Iterator[list[str]]:
    """Ids of the document store (or of its ``row_groups``), one list per batch."""
    return _iter_column(store, "id", batch_rows, row_groups)


def _iter_column(store: str | Path, column: str, batch_rows: int,
                 row_groups: list[int] | None) -> Iterator[list[str]]:
    pq = require("pyarrow.parquet")
    batches = pq.ParquetFile(store).iter_batches(batch_size=batch_rows, columns=[column],
                                                 row_groups=row_groups)
    for batch in batches:
        yield batch.column(0).to_pylist()


def store_features(store: Path, n_features: int, batch_rows: int) -> sp.csr_matrix:
    """Hashed unigram TF-IDF of the whole store (used for k-NN edges on small corpora)."""
    tfidf = HashedTfidf(n_features=n_features, ngram_range=(1, 1), chunk_size=batch_rows)
    tfidf.fit(t for chunk in iter_texts(store, batch_rows) for t in chunk)
    return sp.vstack(list(tfidf.transform_iter(iter_texts(store, batch_rows))), format="csr")


def knn_edges(features: sp.csr_matrix, k: int, block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Each document to its ``k`` most cosine-similar others (rows are L2-normalised)."""
    n = features.shape[0]
    k = min(k, n - 1)
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    src, dst = [], []
    t = features.T.tocsc()
    for start in range(0, n, block):
        sim = (features[start:start + block] @ t).toarray()
        rows = np.arange(sim.shape[0])
        sim[rows, start + rows] = -np.inf
        top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
        src.append(np.repeat(start + rows, k))
        dst.append(top.ravel())
    return np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)


def save_graph_edges(path: Path, num_nodes: int, kinds: dict[str, tuple[np.ndarray, np.ndarray]],
                     fingerprint: str) -> None:
    """Directed edge lists per kind, and the fingerprint of the documents they join;
    readers symmetrise the edges into one undirected graph."""
    arrays: dict[str, Any] = {"num_nodes": np.int64(num_nodes),
                              "documents_fingerprint": np.str_(fingerprint)}
    for kind, (s, d) in kinds.items():
        arrays[f"{kind}_src"], arrays[f"{kind}_dst"] = s, d
    with path.open("wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())


def load_graph_edges(path: str | Path, kinds: tuple[str, ...] = EDGE_KINDS
                     ) -> tuple[int, np.ndarray, np.ndarray]:
    """The edges of ``kinds`` in ``graph.npz`` (default: every kind) as ``(num_nodes, src, dst)``.

    A kind the file lacks contributes no edges: :func:`edge_kinds` says which it has."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: graph file is missing; run `sparsegnn curate ingest`")
    with np.load(path) as z:
        n = int(z["num_nodes"])
        src = [z[f"{k}_src"] for k in kinds if f"{k}_src" in z]
        dst = [z[f"{k}_dst"] for k in kinds if f"{k}_dst" in z]
    empty = np.zeros(0, np.int64)
    return n, np.concatenate([empty, *src]), np.concatenate([empty, *dst])


def edge_kinds(path: str | Path) -> list[str]:
    """The kinds of edges a ``graph.npz`` holds (``knn`` only if ingest made them)."""
    with np.load(Path(path)) as z:
        return [k for k in EDGE_KINDS if f"{k}_src" in z]
