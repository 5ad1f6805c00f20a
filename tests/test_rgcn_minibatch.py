"""R-GCN on sampled minibatches: a sampled block split by relation equals the dense
reference; with fan-outs that keep every neighbour the sampled model is the full-graph
model on the seeds; GraphSAGE, LADIES and ShaDow sampling learn a typed SBM; and two
replicated ranks that each take half of every minibatch end with one process's weights
(float64, 1e-10) when sampling keeps every neighbour; partitioned ranks (rows of the
topology, features and relation index) end with the replicated ranks' weights."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from sparsegnn.data.typed_sbm import typed_sbm
from sparsegnn.distributed import spawn
from sparsegnn.nn.rgcn import RelationIndex, relation_operators
from sparsegnn.sampling import NodeWiseSampler
from sparsegnn.sampling.streams import batch_generator
from sparsegnn.train.minibatch import MinibatchConfig
from sparsegnn.train.rgcn_minibatch import (
    fit_rgcn_sampled,
    relation_blocks,
    train_sampled_rank,
)
from sparsegnn.train.rgcn_partitioned import train_partitioned_rank
from sparsegnn.train.rgcn_task import (
    RGCNRanks,
    RGCNRequest,
    build_classifier,
    model_input,
    relational_problem,
)

BASE = RGCNRequest(hidden=8, epochs=3, lr=0.05, dtype="float64", seed=1, progress=False)
ALL = MinibatchConfig("sage", (1000, 1000), 16, 2, prefetch=False)  # every neighbour


def _graph(nodes: int = 60, features: int = 5):
    return typed_sbm(nodes, blocks=3, degree=3.0, num_features=features, seed=4)


def test_split_equals_the_dense_reference():
    _, rel = relational_problem(BASE, _graph())
    n, num = rel.num_nodes, rel.num_relations
    index = RelationIndex(rel.edge_index, rel.edge_type, num, n)
    seeds = torch.arange(0, n, 3)
    batch = NodeWiseSampler(index.union(torch.float64), [2, 2]).sample(
        [seeds], [batch_generator(0, 0, 0, torch.device("cpu"))])[0]
    dense = torch.zeros(num, n, n, dtype=torch.float64)
    dense.index_put_((rel.edge_type, rel.edge_index[1], rel.edge_index[0]),
                     torch.ones(rel.edge_type.numel(), dtype=torch.float64), accumulate=True)
    for block, ops in zip(batch.layers, relation_blocks(batch, 2, index), strict=True):
        rows, cols = batch.node_ids[:block.shape[0]], batch.node_ids[:block.shape[1]]
        kept = block.to_dense() != 0
        assert len(ops) == num
        for r, op in enumerate(ops):
            want = dense[r][rows][:, cols] * kept
            want = want / want.sum(1, keepdim=True).clamp(min=1)
            torch.testing.assert_close(op.to_dense(), want)
    assert sum(op.nnz for op in relation_blocks(batch, 2, index)[0]) > 0


@pytest.mark.parametrize("featureless", [False, True])
def test_every_neighbour_sampled_is_the_full_graph_model(featureless: bool):
    request = replace(BASE, featureless=featureless, num_bases=2 if featureless else None)
    typed, rel = relational_problem(request, _graph())
    index = RelationIndex(rel.edge_index, rel.edge_type, rel.num_relations, rel.num_nodes)
    model = build_classifier(request, rel, typed.num_classes)
    x = model_input(request, rel)
    full = model(x, relation_operators(rel.edge_index, rel.edge_type, rel.num_relations,
                                       rel.num_nodes, dtype=torch.float64))
    seeds = torch.tensor([5, 0, 17, 33])
    batch = NodeWiseSampler(index.union(torch.float64), [1000, 1000]).sample(
        [seeds], [batch_generator(0, 0, 0, torch.device("cpu"))])[0]
    got = model(x[batch.node_ids], relation_blocks(batch, 2, index))[:4]
    torch.testing.assert_close(got, full[seeds])


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["sage", "ladies", "shadow"])
def test_sampled_rgcn_learns(sampler: str):
    request = replace(BASE, dtype="float32", epochs=8, minibatch=MinibatchConfig(
        sampler, (5, 5) if sampler != "ladies" else (8, 8), 64, 4))
    out = fit_rgcn_sampled(request, typed_sbm(600, blocks=3, degree=4.0, num_features=8,
                                              seed=0)).outcome
    assert out.epochs_run == 8 and out.test_accuracy > 0.7  # 3 classes: chance ~0.33


def _two_ranks(request: RGCNRequest, graph) -> dict:
    result = train_sampled_rank(request, graph)
    return {"weights": result.value.weights, "sent": result.comm.sent}


@pytest.mark.distributed
def test_replicated_ranks_end_with_one_process_weights():
    graph = _graph()
    request = replace(BASE, minibatch=ALL, ranks=RGCNRanks(nprocs=2))
    one = fit_rgcn_sampled(request, graph).model.state_dict()
    ranks = spawn(_two_ranks, 2, (request, graph), wall_timeout_s=120)
    for out in ranks:
        assert out["sent"] > 0
        for key, w in one.items():
            assert (out["weights"][key] - w).abs().max() <= 1e-10, key


def _partitioned(request: RGCNRequest, graph) -> dict:
    result = train_partitioned_rank(request, graph)
    return {"weights": result.value.weights, "phases": result.comm.phases,
            "val": result.value.outcome.val_accuracy}


@pytest.mark.distributed
@pytest.mark.parametrize(("sampler", "fanouts", "featureless"), [
    ("sage", (3, 3), False), ("ladies", (4, 4), False), ("shadow", (3, 2), True)])
def test_partitioned_ranks_end_with_the_replicated_weights(sampler, fanouts, featureless):
    """Each rank keeps its rows of the topology, the features and the relation index,
    yet draws the replicated run's minibatches: the same weights (float64, 1e-10)."""
    graph = _graph()
    mb = MinibatchConfig(sampler, fanouts, 16, 2, prefetch=False)
    request = replace(BASE, minibatch=mb, featureless=featureless,
                      num_bases=2 if featureless else None)
    replicated = spawn(_two_ranks, 2, (replace(request, ranks=RGCNRanks(nprocs=2)), graph),
                       wall_timeout_s=120)
    parted = spawn(_partitioned, 2, (replace(request, ranks=RGCNRanks(
        nprocs=2, topology="partitioned")), graph), wall_timeout_s=120)
    for rank in range(2):
        for key, w in replicated[0]["weights"].items():
            assert (parted[rank]["weights"][key] - w).abs().max() <= 1e-10, (rank, key)
        phases = parted[rank]["phases"]
        assert phases["relations"]["sent"] > 0 and phases["evaluation"]["sent"] > 0
    assert parted[0]["val"] == parted[1]["val"]
