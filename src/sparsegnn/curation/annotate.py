"""Annotate: bulk inference over a whole corpus, written in the Essential-Web layout.

Three streaming passes keep memory at ``O(n x hidden)`` plus one batch of text: featurize
and project each batch (``H0 = X W_in``), propagate ``H0`` over the full document graph
(one SpMM per hop), then classify and write one Parquet row group per batch. The progress
bar counts documents; the report gives the throughput in documents per second, measured
over the whole run (featurization, propagation, classification and writing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from sparsegnn.curation._optional import require
from sparsegnn.curation.distil import Annotator, as_operand, corpus_ids
from sparsegnn.curation.ingest import DOCUMENTS_FILE, iter_ids, iter_texts
from sparsegnn.curation.labels import Prediction, annotation_batch
from sparsegnn.train.memory import peak_memory_bytes

ANNOTATIONS_FILE = "annotations.parquet"


@dataclass
class AnnotateReport:
    num_documents: int
    seconds: float
    docs_per_second: float
    peak_memory_bytes: int
    output: str


def predict(logits: torch.Tensor, classes: list[str]) -> Prediction:
    """Top-2 codes and the primary's probability from one head's logits."""
    probs = torch.softmax(logits, dim=1)
    k = min(2, probs.shape[1])
    top_p, top_i = probs.topk(k, dim=1)
    codes = np.asarray(classes, dtype=object)
    primary = codes[top_i[:, 0].numpy()]
    secondary = codes[top_i[:, 1].numpy()] if k > 1 else np.full(len(primary), None, object)
    return Prediction(primary, secondary, top_p[:, 0].numpy().astype(np.float32))


@torch.no_grad()
def encode_corpus(annotator: Annotator, store: Path, batch_rows: int, bar: tqdm) -> torch.Tensor:
    """``H0 = X W_in`` for every document, featurized one batch at a time."""
    blocks = []
    for block in annotator.featurizer.transform_iter(iter_texts(store, batch_rows)):
        blocks.append(annotator.model.encode(as_operand(block)))
        bar.update(block.shape[0])
    return torch.cat(blocks)


@torch.no_grad()
def annotate(
    store_dir: str | Path,
    annotator: Annotator,
    out_path: str | Path | None = None,
    *,
    batch_rows: int = 16384,
    progress: bool = True,
) -> AnnotateReport:
    """Annotate every document of the store; writes ``annotations.parquet`` by default."""
    pq = require("pyarrow.parquet")
    start = time.perf_counter()
    store_dir = Path(store_dir)
    store = store_dir / DOCUMENTS_FILE
    out = Path(out_path) if out_path is not None else store_dir / ANNOTATIONS_FILE
    n = pq.ParquetFile(store).metadata.num_rows
    model = annotator.model.eval()
    with tqdm(total=2 * n, desc="annotate", unit="doc", disable=not progress) as bar:
        h0 = encode_corpus(annotator, store, batch_rows, bar)
        z = model.propagate(h0, annotator.graph(store_dir, corpus_ids(store_dir)))
        del h0
        tmp = out.with_name(out.name + ".partial")
        writer = None
        row = 0
        for ids in iter_ids(store, batch_rows):
            logits = model.classify(z[row:row + len(ids)])
            preds = {c: predict(lg, annotator.classes[c]) for c, lg in logits.items()}
            batch = annotation_batch(ids, preds, annotator.schema)
            if writer is None:
                writer = pq.ParquetWriter(tmp, batch.schema)
            writer.write_batch(batch)
            row += len(ids)
            bar.update(len(ids))
        if writer is not None:
            writer.close()
            tmp.replace(out)
    seconds = time.perf_counter() - start
    return AnnotateReport(n, seconds, n / seconds if seconds > 0 else float("inf"),
                          peak_memory_bytes(torch.device("cpu")), str(out))
