"""The lines a person reads after ``sparsegnn train`` (and ``sparsegnn demo``).

Kept apart from :mod:`sparsegnn.train.train_request`, which decides what runs, so the
wording of a summary changes in one place whichever mode produced it.
"""

from __future__ import annotations

from typing import Any

from sparsegnn.train.fullgraph import TrainResult
from sparsegnn.train.minibatch import MinibatchConfig


def title(dataset: str, model: str, detail: str = "") -> str:
    """The report's heading."""
    return f"sparsegnn train: {model} on {dataset}{detail}"


def fullgraph_summary(dataset: str, model: str, r: TrainResult) -> str:
    """The two lines a person reads after a full-graph run."""
    return (
        f"{model} on {dataset}: test accuracy {r.test_accuracy:.4f} "
        f"(best validation {r.best_val_accuracy:.4f} at epoch {r.best_epoch}, "
        f"{r.epochs_run} epochs{', stopped early' if r.stopped_early else ''})\n"
        f"median epoch time {r.epoch_time_s * 1e3:.1f} ms, "
        f"peak memory {r.peak_memory_bytes / 2**20:.0f} MiB"
    )


def minibatch_summary(dataset: str, mb: MinibatchConfig, r: dict[str, Any]) -> str:
    """The two lines after a sampled-minibatch run: accuracy, then throughput."""
    fanouts = ",".join(map(str, mb.fanouts))
    stopped = ", stopped early" if r["stopped_early"] else ""
    return (
        f"GraphSAGE on {dataset}, {mb.sampler} sampling (fan-outs {fanouts}, "
        f"batch {mb.batch_size}, bulk {mb.bulk}): test accuracy {r['test_accuracy']:.4f} "
        f"(best validation {r['best_val_accuracy']:.4f} at epoch {r['best_epoch']}, "
        f"{r['epochs_run']} epochs{stopped})\n"
        f"{r['seeds_per_second']:.0f} training seeds/s per rank, "
        f"{r['minibatches_per_epoch']} minibatches/epoch, "
        f"peak memory {r['peak_memory_bytes'] / 2**20:.0f} MiB"
    )


def ogb_line(out: dict[str, Any]) -> str:
    """OGB's Evaluator metrics, where the result has them."""
    ogb = out.get("ogb_evaluator")
    if ogb is None:
        return ""
    shown = ", ".join(f"{split} {k} {v:.4f}" for split, m in ogb.items() for k, v in m.items())
    return f"\nOGB Evaluator ({out['dataset']}): {shown}"


def overlap_summary(trials: list[dict[str, Any]], chosen: bool) -> str:
    """``--overlap auto``'s trial epochs and what they chose."""
    times = ", ".join(f"{'with' if t['overlap'] else 'without'} "
                      f"{t['measured_epoch_s'] * 1e3:.1f} ms" for t in trials)
    return f"\noverlap auto: trial epochs {times}: overlap {'on' if chosen else 'off'}"


def auto_summary(auto: dict[str, Any]) -> str:
    """``--algo auto``'s choice, its predicted and measured epoch, and each trial."""
    overlap = " with overlap" if auto["overlap"] else ""
    text = (f"\nauto: {auto['algo']} c={auto['replication']} {auto['comm']} comm{overlap}, "
            f"{auto['partitioner']} partition; epoch predicted "
            f"{auto['epoch_s'] * 1e3:.1f} ms, measured {auto['measured_epoch_s'] * 1e3:.1f} ms")
    for t in auto["trials"]:
        if t["trial_epoch_s"] is not None:
            overlap = ", overlap" if t["overlap"] else ""
            text += (f"\n  trial {t['algo']} c={t['replication']} {t['comm']}{overlap}: "
                     f"predicted {t['epoch_s'] * 1e3:.1f} ms, measured "
                     f"{t['trial_epoch_s'] * 1e3:.1f} ms")
    return text
