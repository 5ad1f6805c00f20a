"""Inference with a trained Interaction Network, and its model file.

Scoring (:func:`predict` on whole events, :func:`predict_sampled` on bounded ShaDow
subgraphs) and the model file (:func:`save_model`, :func:`load_model`,
:func:`load_track_model`) live here, apart from training (:mod:`sparsegnn.tracking.train`,
which imports this module, never the other way round).

A model file is one checkpoint (:func:`sparsegnn.train.checkpoint.save_checkpoint`,
fingerprint kind ``"track-model"``, loaded ``weights_only``) holding the weights, the
model's sizes and the training report, and, when given, how the model is meant to be
used: the :class:`~sparsegnn.tracking.settings.RecoConfig` it was tuned with, the module
map its graphs were built with and the doublet filter that pruned them. Files written
before those existed load with the defaults.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.names import SCORING_PRECISIONS
from sparsegnn.tracking.hit_graph import HitGraph
from sparsegnn.tracking.model import EdgeOperators, INConfig, InteractionNetwork
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.sampling import shadow_subgraphs
from sparsegnn.tracking.settings import RecoConfig
from sparsegnn.tracking.tracks import EdgeScores
from sparsegnn.train.checkpoint import read_checkpoint, save_checkpoint

if TYPE_CHECKING:
    from sparsegnn.tracking.filter import EdgeFilter
    from sparsegnn.tracking.train import TrainReport

# Checkpoint kinds: a finished model, and a training checkpoint (also usable as a model).
MODEL_KIND, TRAIN_KIND = "track-model", "track-train"


@dataclass(frozen=True)
class GraphInputs:
    """The model's inputs for a set of a graph's hits and edges, on a device."""

    x: torch.Tensor
    edge_attr: torch.Tensor
    ops: EdgeOperators


def graph_inputs(graph: HitGraph, nodes: np.ndarray, edges: np.ndarray,
                 edge_index: np.ndarray, device: torch.device) -> GraphInputs:
    """Features of ``nodes`` and ``edges`` of ``graph``; ``edge_index`` numbers the nodes
    by their position in ``nodes``."""
    return GraphInputs(
        x=torch.from_numpy(graph.node_features[nodes]).to(device),
        edge_attr=torch.from_numpy(graph.edge_features[edges]).to(device),
        ops=EdgeOperators(torch.from_numpy(edge_index).to(device), int(nodes.size)),
    )


def _probabilities(model: InteractionNetwork, inputs: GraphInputs) -> np.ndarray:
    logits = model(inputs.x, inputs.edge_attr, inputs.ops)
    if logits.dtype == torch.bfloat16:  # numpy has no bfloat16
        logits = logits.float()
    return torch.sigmoid(logits).cpu().numpy()


def scoring_model(model: InteractionNetwork, precision: str = "fp32") -> InteractionNetwork:
    """The network to score with at ``precision`` (a ``RecoConfig.precision``): ``model``
    itself for ``"fp32"``; for ``"bf16"`` a copy whose message passing and decoder hold
    bfloat16 weights, so that :meth:`InteractionNetwork._infer` runs them in bfloat16
    (AMX on recent x86 CPUs, tensor cores on GPUs) after float32 encoders.

    Why only for scoring: training keeps float32 weights (a bfloat16 copy cannot learn
    small updates), and the speed-up is the matrix products'; the gathers, LayerNorms and
    residual adds around them move half the bytes. docs/results/tracking.md measures what it
    changes in the scores and the tracks.
    """
    if precision == "fp32":
        return model
    if precision not in SCORING_PRECISIONS:
        raise InvalidValueError(f"precision {precision!r} is not one of {SCORING_PRECISIONS}")
    scorer = copy.deepcopy(model)
    for part in (scorer.node_updates, scorer.edge_updates, scorer.decoder):
        part.to(torch.bfloat16)
    return scorer.eval()


@torch.no_grad()
def predict(model: InteractionNetwork, graph: HitGraph,
            device: torch.device | str = "cpu") -> EdgeScores:
    """Edge probabilities on a whole event graph (inference needs no gradients, so no sampling)."""
    model.eval()
    inputs = graph_inputs(graph, np.arange(graph.num_nodes), np.arange(graph.num_edges),
                          graph.edge_index, torch.device(device))
    scores = _probabilities(model, inputs)
    return EdgeScores(graph.name, graph.edge_index, scores.astype(np.float64), graph.num_nodes)


@torch.no_grad()
def predict_sampled(model: InteractionNetwork, graph: HitGraph, max_nodes: int,
                    fanouts: tuple[int, ...] = (4, 2), seed: int = 0, max_passes: int = 16,
                    device: torch.device | str = "cpu",
                    seed_order: str = "random") -> tuple[EdgeScores, float]:
    """Edge probabilities scored in the context ShaDow training gave them; ``(scores, coverage)``.

    A model trained on ShaDow subgraphs learnt each edge from its source hit's sampled
    neighbourhood; scoring it on the whole event instead shows it a receptive field it
    never trained on. Here an edge is scored in a minibatch where its source is a seed,
    exactly as its loss was computed, and no step holds more than ``max_nodes`` hits, so
    inference is bounded like training. An edge whose target hit falls outside the
    sampled fan-out is not scored in that pass; further passes reseed only the sources of
    unscored edges (edges scored more than once are averaged). ``coverage`` is the
    fraction scored within ``max_passes``; the rest score 0. ``seed_order`` as in training.
    """
    model.eval()
    device = torch.device(device)
    total = np.zeros(graph.num_edges)
    count = np.zeros(graph.num_edges, dtype=np.int64)
    seeds = None
    for sweep in range(max_passes):
        for sub in shadow_subgraphs(graph, max_nodes, fanouts, seed, sweep, seeds, seed_order):
            prob = _probabilities(model, graph_inputs(graph, sub.nodes, sub.edges,
                                                      sub.edge_index, device))
            scored = sub.edges[sub.loss_mask]
            total[scored] += prob[sub.loss_mask]
            count[scored] += 1
        missing = count == 0
        if not missing.any():
            break
        seeds = np.unique(graph.edge_index[0][missing])
    scores = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
    coverage = float((count > 0).mean()) if graph.num_edges else 1.0
    return EdgeScores(graph.name, graph.edge_index, scores, graph.num_nodes), coverage


@dataclass
class TrackModel:
    """A model file as read: the network and what it carries about its use.

    ``settings`` is ``None`` for files written without them (older files, training
    checkpoints); ``module_map`` and ``edge_filter`` are ``None`` when not carried.
    """

    model: InteractionNetwork
    settings: RecoConfig | None = None
    module_map: ModuleMap | None = None
    edge_filter: EdgeFilter | None = None


def save_model(path: str | Path, model: InteractionNetwork, report: TrainReport | dict,
               settings: RecoConfig | None = None, module_map: ModuleMap | None = None,
               edge_filter: EdgeFilter | None = None) -> None:
    """Weights, sizes and the training report in one atomic checkpoint file, with how the
    model is to be used when given (settings, module map, doublet filter)."""
    state: dict[str, Any] = {"config": asdict(model.cfg), "state_dict": model.state_dict(),
                             "report": report if isinstance(report, dict) else report.to_dict()}
    if settings is not None:
        state["settings"] = settings.to_dict()
    if module_map is not None:
        state["module_map"] = {k: v.item() if v.dtype.kind == "U" else torch.from_numpy(v)
                               for k, v in module_map.to_arrays().items()}
    if edge_filter is not None:
        from sparsegnn.tracking.filter import filter_state

        state["filter"] = filter_state(edge_filter)
    save_checkpoint(path, state, {"kind": MODEL_KIND, **asdict(model.cfg)})


def load_model(path: str | Path, device: torch.device | str = "cpu") -> InteractionNetwork:
    """The network of a file written by :func:`save_model`, or of a training checkpoint."""
    return load_track_model(path, device).model


def load_track_model(path: str | Path, device: torch.device | str = "cpu") -> TrackModel:
    """A model file with everything it carries (see :class:`TrackModel`)."""
    ckpt = read_checkpoint(path, what="model file")
    kind = ckpt.fingerprint.get("kind")
    if kind not in (MODEL_KIND, TRAIN_KIND):
        raise DataFormatError(f"{path} is a {kind or 'untyped'} file, not an Interaction "
                              "Network model (write one with 'track train')")
    state = ckpt.state
    try:
        if kind == TRAIN_KIND:  # the loop's layout: weights under "model", sizes in "extra"
            return TrackModel(model_from(state["extra"]["config"], state["model"]).to(device))
        model = model_from(state["config"], state["state_dict"]).to(device)
        found = TrackModel(model)
        if "module_map" in state:
            mm = state["module_map"]
            found.module_map = ModuleMap.from_arrays(
                {k: v.numpy() if isinstance(v, torch.Tensor) else np.array(v)
                 for k, v in mm.items()}, path)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as err:
        raise DataFormatError(f"{path} holds no usable model ({err})") from err
    if "settings" in state:
        found.settings = RecoConfig.from_dict(state["settings"], str(path))
    if "filter" in state:
        from sparsegnn.tracking.filter import filter_from_state

        found.edge_filter = filter_from_state(state["filter"], path).to(device)
    return found


def model_from(config: dict, state_dict: dict[str, torch.Tensor]) -> InteractionNetwork:
    """A network of the sizes ``config`` (an :class:`INConfig` as a dict) with these weights."""
    model = InteractionNetwork(INConfig(**config))
    model.load_state_dict(state_dict)
    return model
