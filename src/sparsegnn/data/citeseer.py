"""CiteSeer with raw text (title + abstract per paper), as published with TAPE.

The text file holds 3186 of the 3312 LINQS papers; citations to papers without text are
dropped, since such nodes would have neither features nor a label. Node features come
from a pluggable text featurizer (hashed TF-IDF by default), and the raw texts stay on the
graph so callers can featurize them differently.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
import torch

from sparsegnn.data.edges import undirected_edge_index
from sparsegnn.data.graph import GraphData
from sparsegnn.data.paths import dataset_dir, read_data_bytes
from sparsegnn.data.splits import stratified_split
from sparsegnn.data.text import HashedTfidf
from sparsegnn.errors import DataFormatError, ShapeError

TEXTS_FILE = "citeseer_texts.txt"
CITES_FILE = "citeseer.cites"


class Featurizer(Protocol):
    """Anything that turns a list of texts into a ``[n, d]`` matrix (sparse or dense)."""

    def fit_transform(self, texts: list[str]) -> Any: ...


def default_featurizer() -> HashedTfidf:
    """4096 hashed uni+bigram buckets; min_df=2 drops words seen in one paper only.

    4096 columns keep the dense feature matrix at ~50 MiB for 3186 papers.
    """
    return HashedTfidf(n_features=2**12, ngram_range=(1, 2), sublinear_tf=True, min_df=2)


def load_citeseer_text(
    root: str | os.PathLike[str] | None = None,
    featurizer: Featurizer | None = None,
    *,
    featurize: bool = True,
    split: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> GraphData:
    """CiteSeer-with-text: 3186 papers, 4225 undirected citations, 6 classes.

    ``root`` is the data root holding ``citeseer_text/`` (or that folder itself).
    ``featurizer`` defaults to :func:`default_featurizer`; ``featurize=False`` skips
    features entirely (``x`` is None) for callers who embed ``texts`` themselves.
    Masks are a stratified random ``split`` drawn with ``seed``, since the dataset has no
    official one.
    """
    folder = dataset_dir("citeseer_text", root)
    node_ids, texts, labels = read_text_records(folder / TEXTS_FILE)
    class_names = sorted(set(labels))
    class_of = {name: i for i, name in enumerate(class_names)}
    y = torch.tensor([class_of[label] for label in labels], dtype=torch.int64)
    edge_index = _read_cites(folder / CITES_FILE, {nid: i for i, nid in enumerate(node_ids)})
    x = None
    if featurize:
        x = _to_dense(featurizer or default_featurizer(), texts)
    train_mask, val_mask, test_mask = stratified_split(y, split, seed)
    return GraphData(
        edge_index=edge_index,
        num_nodes=len(node_ids),
        x=x,
        y=y,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name="citeseer_text",
        texts=texts,
        node_ids=node_ids,
        class_names=class_names,
        meta={"source": str(folder), "split_seed": seed},
    )


def read_text_records(path: Path) -> tuple[list[str], list[str], list[str]]:
    """Parse repeating ``id`` / ``text`` / ``label`` line triples into three lists.

    Splits on ``\\n`` only: ``str.splitlines`` would also break on form feeds and other
    separators that PDF-extracted abstracts contain, shifting every later record.
    """
    content = _read_text(path)
    lines = [line.rstrip("\r") for line in content.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or len(lines) % 3:
        raise DataFormatError(
            f"{path}: expected 3-line records (id, text, label), got {len(lines)} lines"
        )
    node_ids = [s.strip() for s in lines[0::3]]
    labels = [s.strip() for s in lines[2::3]]
    if len(set(node_ids)) != len(node_ids):
        raise DataFormatError(f"{path}: paper ids repeat; each record needs its own id")
    if not all(node_ids) or not all(labels):
        raise DataFormatError(f"{path}: a record has an empty id or label line")
    return node_ids, lines[1::3], labels


def _read_cites(path: Path, index_of: dict[str, int]) -> torch.Tensor:
    """Citation pairs between text papers as an undirected edge_index."""
    content = _read_text(path)
    src, dst = [], []
    for lineno, line in enumerate(content.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise DataFormatError(f"{path}:{lineno}: expected two paper ids, got {line!r}")
        a, b = index_of.get(fields[0]), index_of.get(fields[1])
        if a is not None and b is not None:
            src.append(a)
            dst.append(b)
    return undirected_edge_index(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                                 len(index_of))


def _to_dense(featurizer: Featurizer, texts: list[str]) -> torch.Tensor:
    mat = featurizer.fit_transform(texts)
    dense = mat.toarray() if sp.issparse(mat) else np.asarray(mat)
    if dense.ndim != 2 or dense.shape[0] != len(texts):
        raise ShapeError(
            f"featurizer returned shape {dense.shape}, expected ({len(texts)}, d)"
        )
    return torch.from_numpy(np.ascontiguousarray(dense, dtype=np.float32))


def _read_text(path: Path) -> str:
    """A UTF-8 file's content (or its bundled ``.xz``), or a DataFormatError naming the file."""
    try:
        return read_data_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise DataFormatError(f"{path}: file is missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataFormatError(f"{path}: not readable as UTF-8 text ({err})") from err
