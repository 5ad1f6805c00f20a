"""TensorBoard event files of a training run (``--logdir``).

People read training runs in TensorBoard, so every training command writes its curves
there: while the run goes, each epoch's numbers (loss, accuracies, epoch time, whatever
else the mode records, and the peak memory so far) under ``epoch/``; at the end, the
run's final figures under ``final/``, each rank's bytes and memory under ``ranks/``, and
the run's settings with the tags of its figures for TensorBoard's HParams view. Each run
has a folder of its own (:func:`run_logdir`), so runs never mix.
Only one rank writes, so a distributed run has one set of curves, not one per rank. The
writer is torch's :class:`~torch.utils.tensorboard.SummaryWriter`; the ``tensorboard``
package it needs is optional (the ``tensorboard`` extra).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparsegnn.optional import require

# Epoch-record fields that are not a curve, or are better named in TensorBoard.
_SKIPPED = {"epoch"}
_RENAMED = {"seconds": "epoch_time_s"}


def epoch_scalars(record: Any) -> dict[str, float]:
    """The finite numbers of one epoch's record (a dataclass or a dict), by TensorBoard tag."""
    items = (dataclasses.asdict(record) if dataclasses.is_dataclass(record)
             else dict(record)).items()
    return {f"epoch/{_RENAMED.get(k, k)}": float(v) for k, v in items
            if k not in _SKIPPED and _is_number(v) and math.isfinite(v)}


def rank_scalars(result: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per-rank series of a run's JSON result, where the run had ranks: bytes sent (per
    epoch for full-graph training, in all for tracking) and peak memory."""
    series: dict[str, list[float]] = {}
    comm = result.get("comm")
    per_rank = comm.get("per_rank") if isinstance(comm, Mapping) else None
    if per_rank:
        series["bytes_sent_per_epoch"] = [float(r["sent"]) for r in per_rank]
    if result.get("bytes_sent_per_rank"):
        series["bytes_sent"] = [float(b) for b in result["bytes_sent_per_rank"]]
    memory = result.get("memory_per_rank") or []
    if memory:
        series["peak_memory_bytes"] = [float(m["peak_rss_bytes"]) for m in memory]
    return series


def final_scalars(result: Mapping[str, Any]) -> dict[str, float]:
    """The run's top-level finite numbers (accuracies, median epoch time, peak memory)."""
    return {f"final/{k}": float(v) for k, v in result.items()
            if _is_number(v) and math.isfinite(v)}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


VERSION = "version_"  # each run's folder: <logdir>[/<name>]/version_<N>


def run_logdir(logdir: Path, resume: bool, name: str | None = None) -> Path:
    """The folder a run logs to: a new ``version_N`` under ``logdir`` (under
    ``logdir/name`` when the run is labelled), never one an earlier run wrote.

    A second run into a run's folder would append its curves to the first one's
    (TensorBoard draws both as one line, steps 0..199 then 0..19) and replace its
    ``run.json``; so each run takes the next number, and TensorBoard shows each folder as
    a run of its own. A resumed run continues the newest ``version_N``, or, in a folder
    written before runs were numbered, the folder itself (earlier ``run-N`` folders stay
    as they are, readable beside the new ones).
    """
    parent = logdir / name if name else logdir
    versions = _versions(parent)
    if resume and versions:
        return parent / f"{VERSION}{versions[-1]}"
    if resume and _holds_run(parent):
        return parent
    return parent / f"{VERSION}{versions[-1] + 1 if versions else 0}"


def _versions(folder: Path) -> list[int]:
    """The numbers of ``folder``'s ``version_N`` sub-folders, ascending."""
    if not folder.is_dir():
        return []
    found = (p.name.removeprefix(VERSION) for p in folder.iterdir()
             if p.is_dir() and p.name.startswith(VERSION))
    return sorted(int(n) for n in found if n.isdigit())


def _holds_run(folder: Path) -> bool:
    return (folder / "run.json").is_file() or any(folder.glob("events.out.tfevents.*"))


# Settings about where a run writes and how it shows progress: not hyperparameters.
_NOT_HPARAMS = {"logdir", "checkpoint", "resume", "progress"}


def hparam_values(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A run's configuration as TensorBoard hyperparameters: nested settings flattened to
    dotted names, numbers, booleans and strings kept, lists as text, unset ones left out
    (HParams has no null)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if key in _NOT_HPARAMS:
            continue
        if isinstance(value, Mapping):
            out.update(hparam_values(value, name + "."))
        elif isinstance(value, bool | int | float | str):
            out[name] = value
        elif isinstance(value, list | tuple):
            out[name] = ",".join(map(str, value))
    return out


def hparam_metrics(result: Mapping[str, Any]) -> list[str]:
    """The tags HParams shows beside each run's settings: every final figure, and the
    last validation loss where the epochs recorded one."""
    history = result.get("history") or []
    val_loss = ["epoch/val_loss"] if any(_is_number(h.get("val_loss")) for h in history
                                         if isinstance(h, Mapping)) else []
    return [*final_scalars(result), *val_loss]


class EventLog:
    """One run's event file; every scalar goes to ``logdir``, readable as it is written."""

    def __init__(self, logdir: str | Path) -> None:
        require("tensorboard", "for --logdir")
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(logdir))

    def epoch(self, step: int, record: Any, peak_memory_bytes: int) -> None:
        """Epoch ``step`` (0-based, as in the run's history) and the peak memory so far
        (a leak or a growing cache shows as a rising curve)."""
        for tag, value in epoch_scalars(record).items():
            self._writer.add_scalar(tag, value, step)
        self._writer.add_scalar("epoch/peak_memory_bytes", float(peak_memory_bytes), step)
        self._writer.flush()

    def final(self, result: Mapping[str, Any], step: int) -> None:
        """The final figures and per-rank series of a finished run's JSON result."""
        for tag, value in final_scalars(result).items():
            self._writer.add_scalar(tag, value, step)
        for name, values in rank_scalars(result).items():
            for rank, value in enumerate(values):
                self._writer.add_scalar(f"ranks/{name}/{rank}", value, step)
        self._writer.flush()

    def hparams(self, config: Mapping[str, Any], metrics: list[str]) -> None:
        """The run's settings and the tags of its ``metrics``, for TensorBoard's HParams
        view, written into this run's own folder (``SummaryWriter.add_hparams`` would
        start a sub-run of its own, one more run per run in TensorBoard's list)."""
        from torch.utils.tensorboard.summary import hparams

        writer = self._writer._get_file_writer()
        for summary in hparams(hparam_values(config), dict.fromkeys(metrics, 0.0)):
            writer.add_summary(summary)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
