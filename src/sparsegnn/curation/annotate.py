"""Annotate: bulk inference over a whole corpus, written in the Essential-Web layout.

Three streaming passes keep memory at ``O(n x hidden)`` plus one batch of text: featurize
and project each batch (``H0 = X W_in``), propagate ``H0`` over the full document graph
(one SpMM per hop), then classify and write one Parquet row group per batch. The progress
bar counts documents; the report gives the throughput in documents per second, measured
over the whole run (featurization, propagation, classification and writing).

Over ranks (a torch.distributed process group, e.g. ``torchrun ... sparsegnn curate
annotate``): each rank featurizes, projects, classifies and writes a contiguous share of
the store's row groups, the part of the work that grows with the text. The projected
rows are summed into the full ``n x hidden`` ``H0`` on every rank (one all-reduce of
``n x hidden`` floats, zeros outside each rank's share), so each rank propagates over the
whole graph by itself: cheap next to featurization, and no halo exchange. Rank 0 then
concatenates the ranks' parts, in order, into the one output file.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sparsegnn.curation.distil import Annotator
from sparsegnn.curation.document_store import (
    ANNOTATIONS_FILE,
    DOCUMENTS_FILE,
    DOCUMENTS_FINGERPRINT_KEY,
    FINGERPRINT_KEY,
    GRAPH_FILE,
    check_store,
    parquet_metadata,
    refuse_overwrite,
)
from sparsegnn.curation.ingest import iter_ids, iter_texts
from sparsegnn.curation.labels import Prediction, annotation_batch
from sparsegnn.curation.student_build import as_operand, corpus_ids
from sparsegnn.distributed import (
    RankResult,
    all_reduce_sum,
    barrier,
    in_torchrun,
    rank_and_world,
    rank_session,
    run_on_ranks,
)
from sparsegnn.distributed.runtime.comm import Communicator, Group
from sparsegnn.optional import require
from sparsegnn.train.memory import peak_memory_bytes


@dataclass
class AnnotateReport:
    num_documents: int
    seconds: float
    docs_per_second: float
    peak_memory_bytes: int
    output: str


@dataclass(frozen=True)
class AnnotateOutcome:
    """What ``curate annotate`` reports: rank 0's report and, over spawned ranks, how
    many there were and the bytes each sent (a torchrun rank knows only its own)."""

    report: AnnotateReport
    world_size: int | None = None
    bytes_sent_per_rank: list[int] | None = None
    rank_reports: list[AnnotateReport] | None = None  # every spawned rank's, for benchmarks

    def to_dict(self) -> dict[str, Any]:
        ranks = {} if self.world_size is None else {
            "world_size": self.world_size, "bytes_sent_per_rank": self.bytes_sent_per_rank}
        return {**asdict(self.report), **ranks}


def predict(logits: torch.Tensor, classes: list[str]) -> Prediction:
    """Top-2 codes and the primary's probability from one head's logits."""
    probs = torch.softmax(logits, dim=1)
    k = min(2, probs.shape[1])
    top_p, top_i = probs.topk(k, dim=1)
    codes = np.asarray(classes, dtype=object)
    primary = codes[top_i[:, 0].numpy()]
    secondary = codes[top_i[:, 1].numpy()] if k > 1 else np.full(len(primary), None, object)
    return Prediction(primary, secondary, top_p[:, 0].numpy().astype(np.float32))


@dataclass(frozen=True)
class Share:
    """The row groups (and the rows ``start:stop`` they hold) one rank annotates, out of
    the store's ``total`` rows."""

    row_groups: list[int]
    start: int
    stop: int
    total: int


def share_of(store: Path, rank: int, world: int) -> Share:
    """A contiguous ``1/world`` of the store's row groups for ``rank``."""
    pq = require("pyarrow.parquet")
    meta = pq.ParquetFile(store).metadata
    rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    lo, hi = len(rows) * rank // world, len(rows) * (rank + 1) // world
    start = sum(rows[:lo])
    return Share(list(range(lo, hi)), start, start + sum(rows[lo:hi]), sum(rows))


@torch.no_grad()
def encode_corpus(annotator: Annotator, store: Path, batch_rows: int, bar: tqdm,
                  row_groups: list[int] | None = None) -> torch.Tensor:
    """``H0 = X W_in`` for every document (of ``row_groups``), one batch at a time."""
    blocks = [torch.zeros(0, annotator.model.encoded_width)]
    texts = iter_texts(store, batch_rows, row_groups)
    for block in annotator.featurizer.transform_iter(texts):
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
    comm: Communicator | None = None,
) -> AnnotateReport:
    """Annotate every document of the store; writes ``annotations.parquet`` by default.

    In an initialised process group of several ranks, every rank must call this with the
    same arguments; each annotates its share and rank 0 writes the output file (``comm``,
    when given, counts the bytes of the one collective). The output records the
    documents' fingerprint, and appears whole or not at all."""
    start = time.perf_counter()
    store_dir = Path(store_dir)
    store = store_dir / DOCUMENTS_FILE
    out = Path(out_path) if out_path is not None else store_dir / ANNOTATIONS_FILE
    refuse_overwrite(out, store, store_dir / GRAPH_FILE)
    check_store(store_dir)
    fingerprint = parquet_metadata(store, FINGERPRINT_KEY)
    rank, world = rank_and_world()
    share = share_of(store, rank, world)
    n = share.total
    partial = out.with_name(out.name + ".partial")
    part = out.with_name(f"{out.name}.part{rank}") if world > 1 else partial
    try:
        _annotate_share(annotator, store_dir, share, batch_rows, part, fingerprint, progress,
                        comm)
        if world > 1:
            barrier()
            if rank == 0:
                _concatenate([out.with_name(f"{out.name}.part{r}") for r in range(world)],
                             partial, fingerprint)
            barrier()
        if rank == 0:
            partial.replace(out)
    except BaseException:
        for leftover in {part, partial} if rank == 0 else {part}:
            leftover.unlink(missing_ok=True)
        raise
    seconds = time.perf_counter() - start
    return AnnotateReport(n, seconds, n / seconds if seconds > 0 else float("inf"),
                          peak_memory_bytes(torch.device("cpu")), str(out))


def _annotate_share(annotator: Annotator, store_dir: Path, share: Share, batch_rows: int,
                    part: Path, fingerprint: str | None, progress: bool,
                    comm: Communicator | None) -> None:
    """Encode this rank's share, propagate over the whole graph, write the share's rows."""
    rank, world = rank_and_world()
    store = store_dir / DOCUMENTS_FILE
    bar = tqdm(total=2 * (share.stop - share.start), desc="annotate", unit="doc",
               disable=None if progress and rank == 0 else True)
    with bar:
        h0 = _full_h0(encode_corpus(annotator, store, batch_rows, bar, share.row_groups),
                      share, share.total, world, comm)
        z = annotator.model.eval().propagate(h0, annotator.graph(store_dir,
                                                                 corpus_ids(store_dir)))
        del h0
        _write_share(annotator, store, z, share, batch_rows, part, bar, fingerprint)


def _full_h0(local: torch.Tensor, share: Share, n: int, world: int,
             comm: Communicator | None) -> torch.Tensor:
    """Every document's ``H0`` from each rank's share (an all-reduce of zero-padded rows)."""
    if world == 1:
        return local
    h0 = local.new_zeros(n, local.shape[1])
    h0[share.start:share.stop] = local
    if comm is None:
        return all_reduce_sum(h0)
    rank, _ = rank_and_world()
    with comm.phase("h0_allreduce"):
        return comm.all_reduce(h0, Group(tuple(range(world)), rank))


def annotate_job(store_dir: str | Path, model: str | Path, out_path: str | Path,
                 nprocs: int = 1, *, batch_rows: int = 16384, progress: bool = True,
                 timeout_s: float = 600.0) -> AnnotateOutcome | None:
    """``curate annotate``: in this process, over ``nprocs`` spawned local gloo ranks, or
    as this process's rank of a torchrun job (annotation runs on the CPU, so gloo). Rank
    0's outcome; ``None`` on the other torchrun ranks, where rank 0 reports."""
    if nprocs == 1 and not in_torchrun():
        return AnnotateOutcome(annotate(store_dir, Annotator.load(model), out_path,
                                        batch_rows=batch_rows, progress=progress))
    ran = run_on_ranks(_annotate_rank, nprocs,
                       (str(store_dir), str(model), str(out_path), batch_rows, timeout_s,
                        progress and in_torchrun()),  # spawned ranks draw no bar
                       heartbeat_timeout_s=timeout_s)
    if ran.lead is None:
        return None
    if not ran.spawned:
        return AnnotateOutcome(ran.lead.value)
    return AnnotateOutcome(ran.lead.value, len(ran.results),
                           [r.comm.sent for r in ran.results], [r.value for r in ran.results])


def _annotate_rank(store_dir: str, model: str, out_path: str, batch_rows: int,
                   timeout_s: float, progress: bool) -> RankResult[AnnotateReport]:
    """One rank of :func:`annotate_job`, spawned or of a torchrun job."""
    with rank_session("gloo", timeout_s) as session:  # annotation runs on the CPU
        comm = Communicator()
        report = annotate(store_dir, Annotator.load(model), out_path, batch_rows=batch_rows,
                          progress=progress, comm=comm)
    return RankResult(session.rank, session.world_size, report, comm.counts())


def _write_share(annotator: Annotator, store: Path, z: torch.Tensor, share: Share,
                 batch_rows: int, path: Path, bar: tqdm, fingerprint: str | None) -> None:
    """Classify this share's rows of ``z`` and write them, one row group per batch (an
    empty share writes nothing)."""
    pq = require("pyarrow.parquet")
    writer = None
    row = share.start
    for ids in iter_ids(store, batch_rows, share.row_groups):
        logits = annotator.model.classify(z[row:row + len(ids)])
        preds = {c: predict(lg, annotator.classes[c]) for c, lg in logits.items()}
        batch = annotation_batch(ids, preds, annotator.schema)
        if writer is None:
            writer = pq.ParquetWriter(path, batch.schema)
        writer.write_batch(batch)
        row += len(ids)
        bar.update(len(ids))
    if writer is not None:
        _close(writer, fingerprint)


def _close(writer: Any, fingerprint: str | None) -> None:
    """Finish a Parquet file, recording which documents it annotates (when they say)."""
    if fingerprint is not None:
        writer.add_key_value_metadata({DOCUMENTS_FINGERPRINT_KEY: fingerprint})
    writer.close()


def _concatenate(parts: list[Path], out: Path, fingerprint: str | None) -> None:
    """The ranks' part files, in rank order, as one file (row group by row group); the
    parts are removed."""
    pq = require("pyarrow.parquet")
    writer = None
    for part in parts:
        if not part.exists():  # a rank with no row groups
            continue
        f = pq.ParquetFile(part)
        for i in range(f.num_row_groups):
            table = f.read_row_group(i)
            if writer is None:
                writer = pq.ParquetWriter(out, table.schema)
            writer.write_table(table)
        part.unlink()
    if writer is not None:
        _close(writer, fingerprint)
