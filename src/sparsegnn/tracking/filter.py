"""Doublet filter: a small per-edge MLP that drops most fake candidates before the GNN.

Exa.TrkX puts a filter between graph construction and the GNN. Our doublet cuts bound
dphi, the phi slope and z0 one at a time and with one value for the whole detector; a
filter learns their joint distribution per place in the detector (the hits' r and z),
which the cuts cannot express. Its input is only the two hits of a candidate (no
message passing), so it costs ~5k multiply-adds per edge against ~60k for the
Interaction Network, and every edge it removes is one the IN does not score.

At 5000 muons per event the cut graph (phi slope 0.0004) has ~920k edges at 6% purity;
a filter trained for 3 epochs on four events keeps 99.9% of a held-out event's target
edges with 14% of its edges (purity 0.43) in 0.5 s (docs/results/tracking.md). The threshold is
set on the training graphs so that ``keep`` of their target edges pass, an operating
point stated in what is kept, not in logits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking import graph_kernel
from sparsegnn.tracking.hit_graph import EDGE_SCALE, NODE_SCALE, HitGraph
from sparsegnn.tracking.model import forward_layers, mlp
from sparsegnn.train.checkpoint import (
    content_hash,
    read_checkpoint,
    save_checkpoint,
    seed_everything,
)
from sparsegnn.train.loop import LoopConfig, run_epochs

NUM_FEATURES = 10  # r, z of both hits; dr, dphi, dz, deta; phi slope; z0
# Each column's scale (of order one): r, z of both hits [mm]; dr, dphi, dz, deta; the phi
# slope; z0 from the vertex.
_DIVISOR = np.array([1000.0, 1000.0, 1000.0, 1000.0, 100.0, 0.05, 100.0, 0.1, 3e-4, 100.0])
_CHUNK = 16384  # edges per chunk when scoring without autograd (stays in cache)
FILTER_KIND = "track-filter"  # the kind in a filter file's checkpoint fingerprint
FILTER_TRAIN_KIND = "track-filter-train"  # ... and in a filter training checkpoint's


@dataclass(frozen=True)
class FilterConfig:
    """Size and training of the filter; ``keep`` is the fraction of the training graphs'
    target edges the threshold lets through."""

    hidden: int = 64
    layers: int = 3
    epochs: int = 6
    lr: float = 3e-3
    batch_edges: int = 8192
    keep: float = 0.999
    seed: int = 0
    patience: int | None = None  # early stopping, with validation graphs
    progress: bool | None = False  # the loop's bar: always, never (default), on a terminal
    logdir: Path | None = None  # TensorBoard event files


class EdgeFilter(nn.Module):
    """MLP from :func:`doublet_features` to one logit per edge, with its threshold."""

    def __init__(self, hidden: int = 64, layers: int = 3):
        super().__init__()
        self.hidden, self.layers = hidden, layers
        self.net = mlp(NUM_FEATURES, hidden, 1, layers, final_act=False)
        self.register_buffer("threshold", torch.tensor(float("-inf")))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return forward_layers(self.net, features).squeeze(1)

    @torch.no_grad()
    def logits(self, graph: HitGraph) -> torch.Tensor:
        """Logits of every edge of ``graph``, in chunks (bounded memory on any event), on
        the filter's device (its features are made on the CPU)."""
        feats = doublet_features(graph).to(self.threshold.device)
        return torch.cat([self(feats[lo:lo + _CHUNK]) for lo in range(0, feats.shape[0], _CHUNK)]
                         or [feats.new_empty(0)])

    def prune(self, graph: HitGraph) -> HitGraph:
        """``graph`` with only the edges at or above the threshold (not ``apply``, which
        ``nn.Module`` uses for visiting submodules)."""
        return graph.keep_edges((self.logits(graph) >= self.threshold).cpu().numpy())


def doublet_features(graph: HitGraph) -> torch.Tensor:
    """Per-edge inputs of the filter, ``[E, NUM_FEATURES]``, all of order one.

    Azimuth itself is left out (the detector is symmetric in phi). The phi slope and z0
    are the cuts' quantities, recomputed here because the cuts pass pairs closer than
    ``min_dr`` without them: such pairs get dr clamped to 10 mm, as a hint, not a cut.
    z0 is taken relative to :func:`vertex_z`, the event's densest z0: a gun event has one
    vertex, and absolute z0 let a filter trained on eight events learn their eight
    vertices (it dropped 42% of the target edges of held-out events whose vertex lay
    outside them).
    """
    fast = graph_kernel.doublet_features(graph.edge_index, graph.node_features,
                                         graph.edge_features, NODE_SCALE, EDGE_SCALE, _DIVISOR)
    if fast is None:
        feats, z0 = _features(graph)
    else:
        feats, z0 = fast
    feats[:, -1] = (z0 - vertex_z(z0)) / _DIVISOR[-1]
    return torch.from_numpy(feats)


def _features(graph: HitGraph) -> tuple[np.ndarray, np.ndarray]:
    """numpy's form of :func:`sparsegnn.tracking.graph_kernel.doublet_features`: the
    first nine columns, and z0."""
    src, dst = graph.edge_index
    node = graph.node_features * NODE_SCALE
    dr, dphi, dz, deta = (graph.edge_features * EDGE_SCALE).T
    safe_dr = np.where(np.abs(dr) >= 10.0, dr, np.copysign(10.0, dr))
    r_src, z_src = node[src, 0], node[src, 2]
    columns = (r_src, z_src, node[dst, 0], node[dst, 2], dr, dphi, dz, deta, dphi / safe_dr)
    feats = np.empty((src.size, NUM_FEATURES), dtype=np.float32)
    for k, column in enumerate(columns):  # no float64 [E, 10] stack (a tenth of the graph time)
        feats[:, k] = column / _DIVISOR[k]
    return feats, z_src - r_src * dz / safe_dr


def vertex_z(z0: np.ndarray, span: float = 300.0, bin_mm: float = 2.0) -> float:
    """The densest z0 of an event's candidate doublets, in mm (0 for an empty graph).

    The z0 histogram of pixel doublets is how fast triggers find the primary vertex: true
    doublets pile up in one bin, fakes spread over all of them. The peak bin's mean is
    refined over its neighbours.
    """
    inside = z0[np.abs(z0) < span]
    if inside.size == 0:
        return 0.0
    counts, edges = np.histogram(inside, bins=int(2 * span / bin_mm), range=(-span, span))
    peak = int(np.argmax(counts))
    low, high = edges[max(peak - 1, 0)], edges[min(peak + 2, counts.size)]
    near = inside[(inside >= low) & (inside < high)]
    return float(near.mean())


@dataclass(frozen=True)
class FilterEpoch:
    """One epoch of filter training; ``edges_dropped`` is the fraction of the validation
    graphs' edges the filter drops at the threshold keeping ``keep`` of their targets
    (what early stopping watches; NaN without validation graphs)."""

    epoch: int
    loss: float  # mean over the epoch's batches
    seconds: float
    edges_dropped: float = float("nan")


def train_filter(graphs: list[HitGraph], cfg: FilterConfig = FilterConfig(),
                 checkpoint: str | Path | None = None, resume: bool = False,
                 validation: list[HitGraph] | None = None
                 ) -> tuple[EdgeFilter, list[FilterEpoch]]:
    """Fit the filter on every edge of ``graphs`` and set its threshold; the filter and
    the per-epoch history.

    The loss is the Interaction Network's: target edges up-weighted by the negatives per
    positive, and true edges of non-target particles (soft particles) weighted 0, so the
    filter neither keeps nor drops them on purpose. Epochs run through
    :func:`sparsegnn.train.loop.run_epochs` like every training mode: ``checkpoint`` is
    rewritten after each (``resume`` continues from it, bit for bit), ``cfg.logdir``
    gets TensorBoard curves, and with ``validation`` graphs and ``cfg.patience`` training
    stops once ``edges_dropped`` has not improved for that many epochs, ending on the
    best weights.
    """
    if not 0.0 < cfg.keep <= 1.0:
        raise InvalidValueError(f"keep must be in (0, 1], got {cfg.keep}")
    if resume and checkpoint is None:
        raise InvalidValueError("resume needs the checkpoint to resume from")
    feats = torch.cat([doublet_features(g) for g in graphs])
    target = torch.from_numpy(np.concatenate([g.target for g in graphs]))
    true = torch.from_numpy(np.concatenate([g.y for g in graphs]))
    if not bool(target.any()) or (validation is not None
                                  and not any(g.target.any() for g in validation)):
        raise InvalidValueError("the training (or validation) graphs have no target edges "
                                "to keep")
    weight = torch.where(true & ~target, 0.0, 1.0)
    pos_weight = (~target).sum() / target.sum()
    seed_everything(cfg.seed)
    filt = EdgeFilter(cfg.hidden, cfg.layers)
    optim = torch.optim.Adam(filt.parameters(), lr=cfg.lr)

    def epoch_fn(epoch: int) -> FilterEpoch:
        start, total, batches = time.perf_counter(), 0.0, 0
        for batch in torch.randperm(feats.shape[0]).split(cfg.batch_edges):
            loss = F.binary_cross_entropy_with_logits(
                filt(feats[batch]), target[batch].float(), weight[batch], pos_weight=pos_weight)
            optim.zero_grad()
            loss.backward()
            optim.step()
            total, batches = total + float(loss.detach()), batches + 1
        dropped = float("nan") if validation is None else edges_dropped(filt, validation,
                                                                         cfg.keep)
        return FilterEpoch(epoch, total / max(batches, 1), time.perf_counter() - start, dropped)

    loop = LoopConfig(epochs=cfg.epochs, patience=None if validation is None else cfg.patience,
                      checkpoint=None if checkpoint is None else Path(checkpoint),
                      resume=resume, progress=cfg.progress, logdir=cfg.logdir)
    state = run_epochs(filt, optim, epoch_fn, loop, FilterEpoch,
                       score=None if validation is None else (lambda e: e.edges_dropped),
                       stamp=_train_fingerprint(cfg, graphs))
    filt.threshold.fill_(keep_threshold(torch.cat([filt.logits(g) for g in graphs]), target,
                                        cfg.keep))
    return filt, state.history


def edges_dropped(filt: EdgeFilter, graphs: list[HitGraph], keep: float) -> float:
    """The fraction of ``graphs``' edges below the threshold that keeps ``keep`` of their
    target edges: how much a filter saves the GNN at the operating point asked for."""
    logits = torch.cat([filt.logits(g) for g in graphs])
    target = torch.from_numpy(np.concatenate([g.target for g in graphs]))
    return float((logits < keep_threshold(logits, target, keep)).float().mean())


def _train_fingerprint(cfg: FilterConfig, graphs: list[HitGraph]) -> dict[str, Any]:
    """What a filter training checkpoint must match to resume: the filter's sizes, the
    batches and the training graphs (names and sizes, hashed)."""
    events = [[g.name, g.num_nodes, g.num_edges] for g in graphs]
    return {"kind": FILTER_TRAIN_KIND, "hidden": cfg.hidden, "layers": cfg.layers,
            "batch_edges": cfg.batch_edges, "graphs": content_hash(events)[:16]}


def keep_threshold(logits: torch.Tensor, target: torch.Tensor, keep: float) -> float:
    """The largest logit threshold that keeps at least ``keep`` of the target edges."""
    ranked = logits[target].sort().values
    drop = int(np.floor((1.0 - keep) * ranked.numel()))
    return float(ranked[min(drop, ranked.numel() - 1)])


def filter_state(filt: EdgeFilter) -> dict:
    """The filter as plain data and tensors (sizes, weights, threshold): what a filter file
    holds, and what a model file carries when its reconstruction prunes with a filter."""
    return {"filter": {"hidden": filt.hidden, "layers": filt.layers},
            "state_dict": filt.state_dict()}


def filter_from_state(state: dict, source: str | Path) -> EdgeFilter:
    """The filter of :func:`filter_state`'s ``state``; ``source`` names the file in errors."""
    try:
        filt = EdgeFilter(**state["filter"])
        filt.load_state_dict(state["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise DataFormatError(f"{source} holds no usable edge filter ({err})") from err
    return filt.eval()


def save_filter(path: str | Path, filt: EdgeFilter) -> None:
    state = filter_state(filt)
    save_checkpoint(path, state, {"kind": FILTER_KIND, **state["filter"]})


def load_filter(path: str | Path) -> EdgeFilter:
    """A filter written by :func:`save_filter` (plain data only: no code runs on load)."""
    ckpt = read_checkpoint(path, what="filter file")
    if ckpt.fingerprint.get("kind") != FILTER_KIND:
        raise DataFormatError(f"{path} is not an edge filter (write one with 'track "
                              "train-filter')")
    return filter_from_state(ckpt.state, path)


def filter_summary(filt: EdgeFilter, graphs: list[HitGraph]) -> dict[str, float]:
    """What ``filt`` keeps of ``graphs`` (its training graphs, for ``track train-filter``):
    its threshold, the fractions of edges and of target edges kept, the mean purity after."""
    pruned = [filt.prune(g) for g in graphs]
    return {"threshold": float(filt.threshold),
            "edges_kept": sum(g.num_edges for g in pruned) / sum(g.num_edges for g in graphs),
            "targets_kept": (sum(int(g.target.sum()) for g in pruned)
                             / sum(int(g.target.sum()) for g in graphs)),
            "mean_purity_after": float(np.mean([g.stats().purity for g in pruned]))}
