"""The tasks beside node classification, as ``sparsegnn train`` runs them: request in,
:class:`~sparsegnn.train.train_request.TrainOutcome` out.

* :func:`run_link_task`: link prediction (:mod:`sparsegnn.train.link_task`) on any graph
  with features, or an ``ogbl-*`` dataset with its official split;
* :func:`run_graph_task`: whole-graph classification with stratified k-fold evaluation
  (:mod:`sparsegnn.train.graph_task`) on a graph set (TU folder or name, ``ogbg-*``, PyG
  dataset file);
* :func:`run_rgcn_task`: R-GCN node classification (:mod:`sparsegnn.train.rgcn_task`;
  on a grid of ranks :mod:`sparsegnn.train.rgcn_grid`) on a typed graph (``hsbm:`` spec,
  ``acm``, HeteroData file, DGL or OpenHINE folder).

Each refuses, in one line, a source of the wrong kind before training; each outcome's
JSON result is its ``to_dict`` with the run's dataset, task, device and configuration,
the per-epoch history under ``history`` (which the command line shows only when asked).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from sparsegnn.data.graph_set_io import load_graph_set
from sparsegnn.data.hetero_io import is_hetero_source
from sparsegnn.data.kg import KG_DATASETS, SPLIT_FILES
from sparsegnn.errors import InvalidValueError
from sparsegnn.train.graph_parallel import cross_validate_parallel
from sparsegnn.train.graph_task import GraphRequest, cross_validate
from sparsegnn.train.link_task import LinkRequest, link_data, train_link
from sparsegnn.train.rgcn_grid import train_rgcn_grid
from sparsegnn.train.rgcn_minibatch import train_rgcn_sampled
from sparsegnn.train.rgcn_partitioned import train_rgcn_partitioned
from sparsegnn.train.rgcn_task import RGCNRequest, train_rgcn
from sparsegnn.train.train_request import TrainOutcome, plain_config
from sparsegnn.train.train_summary import title


def run_link_task(dataset: str, request: LinkRequest, data_dir: str | None = None,
                  device: str = "cpu") -> TrainOutcome:
    """Split ``dataset`` (or take its OGB split), train the encoder and decoder, and report
    validation and test AUC, AP, Hits@K and MRR; ``test_auc``, ``test_ap``, ... are also
    flat keys (``hits@10`` as ``test_hits_at_10``)."""
    refuse_typed(dataset, data_dir, "link prediction")
    graph, split = link_data(dataset, data_dir)
    _, outcome = train_link(graph, request, split, device)
    result = outcome.to_dict()
    flat = flat_link_metrics(result)
    out = {"dataset": graph.name, "task": "link", "model": request.model,
           "decoder": request.decoder, "device": device, **flat, **result,
           "config": plain_config(request)}
    heading = title(graph.name, request.model, f", link prediction ({request.decoder})")
    return TrainOutcome(heading, out, f"{request.model}+{request.decoder} on {graph.name}: "
                                      + outcome.summary())


def run_graph_task(dataset: str, request: GraphRequest, data_dir: str | None = None,
                   device: str = "cpu", nprocs: int = 1, backend: str | None = None,
                   timeout_s: float = 60.0) -> TrainOutcome:
    """Cross-validate ``request`` on the graph set ``dataset`` (the GIN paper's protocol);
    ``nprocs`` > 1: each fold data-parallel on that many spawned ranks
    (:mod:`sparsegnn.train.graph_parallel`), their bytes in ``bytes_sent_per_rank``."""
    refuse_typed(dataset, data_dir, "graph classification")
    data = load_graph_set(dataset, data_dir)
    ranks: dict[str, object] = {}
    if nprocs > 1:
        outcome, counts = cross_validate_parallel(data, request, nprocs, backend, timeout_s)
        ranks = {"ranks": nprocs, "bytes_sent_per_rank": [c.sent for c in counts]}
    else:
        outcome = cross_validate(data, request, device)
    out = {"dataset": data.name, "task": "graph", "model": request.model, "device": device,
           "read_from": data.read_from(), **ranks, **outcome.to_dict(),
           "config": plain_config(request)}
    note = () if "origin" not in data.meta else (f"{data.name} is not in the data root; "
                                                 f"read from {data.read_from()}",)
    return TrainOutcome(title(data.name, request.model, f", {request.folds}-fold graph "
                                                        "classification"),
                        out, f"{request.model}: {outcome.summary()}", note)


def run_rgcn_task(request: RGCNRequest) -> TrainOutcome:
    """Train R-GCN on the typed graph ``request.source``: full-graph (on ``request.ranks``'
    grid when given: then with ``algo``, ``grid`` and ``comm``, the bytes against the
    model) or on sampled minibatches (``request.minibatch``; ranks with a replicated or
    a partitioned topology); a homogeneous graph is refused."""
    if not is_hetero_source(request.source, request.data_dir):
        raise InvalidValueError(
            f"{request.source}: R-GCN trains on a typed graph (hsbm:... spec, acm, a "
            "HeteroData .pt file, a DGL or OpenHINE folder); this one is homogeneous: "
            "train it with --model gcn, sage, gat, gatv2 or gin")
    where = ""
    if request.minibatch is not None:
        topology = "replicated" if request.ranks is None else request.ranks.topology
        replicas = (train_rgcn_partitioned(request) if topology == "partitioned"
                    else train_rgcn_sampled(request))
        outcome = replicas[0].value.outcome
        result = {**asdict(outcome), "mode": "minibatch", "sampler": request.minibatch.sampler,
                  "world_size": len(replicas), "topology": topology,
                  "comm_per_rank": [r.comm.totals().to_dict() for r in replicas]}
        where = f"; {request.minibatch.sampler} minibatches on " + (
            "one process" if len(replicas) == 1 else f"{len(replicas)} {topology} ranks")
    elif request.ranks is not None:
        grid = train_rgcn_grid(request)
        outcome, result = grid.outcome, grid.to_dict()
        mib = result["comm"]["total_bytes_per_epoch"] / 2**20
        where = f"; {grid.shape.describe()}, {mib:.2f} MiB sent per epoch (all ranks)"
    else:
        outcome = train_rgcn(request)
        result = asdict(outcome)
    config = {**plain_config(replace(request, ranks=None, minibatch=None)),
              **{k: None if v is None else asdict(v) for k, v in
                 (("ranks", request.ranks), ("minibatch", request.minibatch))}}
    out = {"dataset": outcome.graph, "task": "node", "model": "rgcn",
           "device": request.device, **result, "config": config}
    inputs = "featureless" if outcome.featureless else "features"
    summary = (f"rgcn on {outcome.graph}: test accuracy {outcome.test_accuracy:.4f} "
               f"(val {outcome.val_accuracy:.4f}, train {outcome.train_accuracy:.4f}; "
               f"{outcome.num_relations} relations, {inputs}, best epoch "
               f"{outcome.best_epoch} of {outcome.epochs_run}, "
               f"{1000 * outcome.epoch_s:.1f} ms/epoch{where})")
    return TrainOutcome(title(outcome.graph, "rgcn"), out, summary)


def check_node_source(dataset: str, data_dir: str | None = None,
                      model: str | None = None) -> None:
    """Refuse a typed graph for a homogeneous node model, naming the one that trains it."""
    if model != "rgcn":
        refuse_typed(dataset, data_dir, f"--model {model or 'gcn'}")


def refuse_typed(dataset: str, data_dir: str | Path | None, what: str) -> None:
    """One line for a typed graph given to a path that reads plain graphs, saying where
    typed graphs do train (link prediction on typed edges: the knowledge-graph path)."""
    if not is_hetero_source(dataset, data_dir):
        return
    where = ("link prediction on typed edges reads knowledge-graph triples instead: "
             f"--model rgcn with --dataset {'|'.join(KG_DATASETS)} or a folder of "
             f"{', '.join(SPLIT_FILES.values())}" if what == "link prediction"
             else "train it with --model rgcn")
    raise InvalidValueError(f"{dataset} is a typed (heterogeneous) graph, which {what} "
                            f"does not read; {where}")


def metric_key(metric: str) -> str:
    """A metric's name as a snake_case JSON key (``hits@10`` -> ``hits_at_10``)."""
    return metric.replace("@", "_at_")


def flat_link_metrics(result: dict[str, Any]) -> dict[str, Any]:
    """A link outcome's test and validation metrics as top-level keys (``test_auc``,
    ``val_hits_at_10``): the standard names every task's ``--json`` uses."""
    return {f"{part}_{metric_key(k)}": v for part in ("test", "val")
            for k, v in result[part].items()}
