"""Sampled link prediction: the LinkNeighborLoader-style loader, and training on gloo
ranks over a partitioned topology ending with the weights of the replicated run."""

from __future__ import annotations

import json

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data.generators import sbm
from sparsegnn.errors import InvalidValueError
from sparsegnn.sampling.link_loader import LinkMinibatchLoader
from sparsegnn.sampling.link_split import random_link_split
from sparsegnn.sampling.samplers import NodeWiseSampler
from sparsegnn.sparse import CSRMatrix
from sparsegnn.train.link_sampled import LinkSampledRequest, train_link_sampled
from sparsegnn.train.link_task import LinkRequest

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def graph():
    return sbm(96, 4, 6.0, mixing=0.1, seed=4, num_features=10, feature_noise=1.0)


def _loader(graph, split, rank: int, world: int, **kw) -> LinkMinibatchLoader:
    adj = CSRMatrix.from_edge_index(split.train_message, graph.num_nodes)
    return LinkMinibatchLoader(NodeWiseSampler(adj, [3, 2]), split.train.pos, graph.x,
                               graph.num_nodes, batch_size=40, bulk=2, seed=1,
                               prefetch=False, rank=rank, world_size=world, **kw)


def test_loader_draws_negatives_into_the_minibatch_and_samples_their_endpoints(graph):
    split = random_link_split(graph.edge_index, graph.num_nodes, seed=0)
    shares = [list(_loader(graph, split, r, 2, neg_ratio=2.0).epoch(3)) for r in range(2)]
    again = list(_loader(graph, split, 0, 2, neg_ratio=2.0).epoch(3))
    seen = torch.cat([b.positions[b.labels == 1] for s in shares for b in s])
    assert sorted(seen.tolist()) == list(range(split.train.num_pos))  # each seed edge once
    for first, second in zip(*shares, strict=True):
        assert first.global_pairs == second.global_pairs == first.labels.numel() + \
            second.labels.numel()
    for item, twin in zip(shares[0], again, strict=True):
        positives = int(item.labels.sum())
        assert item.labels.numel() - positives == round(2.0 * positives)
        assert torch.equal(item.pairs, twin.pairs)  # a function of (seed, epoch) alone
        ends = item.batch.seeds[item.pairs]  # local rows back to global ids
        assert torch.equal(ends[:, :positives], split.train.pos[:, item.positions[:positives]])
        assert torch.equal(item.x, graph.x[item.batch.node_ids])
        assert torch.equal(item.batch.seeds, torch.unique(ends.flatten()))


def test_partitioned_topology_ends_with_the_weights_of_the_replicated_run(graph):
    split = random_link_split(graph.edge_index, graph.num_nodes, seed=0)
    link = LinkRequest(model="sage", hidden=8, out_channels=6, epochs=3, lr=0.05)
    common = {"link": link, "fanouts": (4, 3), "batch_size": 64, "bulk": 2, "nprocs": 4,
              "dtype": "float64"}
    replicated = train_link_sampled(graph, LinkSampledRequest(**common), split)
    partitioned = train_link_sampled(
        graph, LinkSampledRequest(**common, topology="partitioned", replication=2), split)
    for name, value in replicated.weights.items():
        assert torch.allclose(partitioned.weights[name], value, rtol=0, atol=1e-12), name
    assert [h.loss for h in partitioned.history] == pytest.approx(
        [h.loss for h in replicated.history], abs=1e-12)
    assert partitioned.test == pytest.approx(replicated.test)
    assert set(replicated.test) >= {"auc", "ap"} and len(replicated.history) == 3
    # Only the partitioned run samples and fetches across ranks.
    for phase in ("sampling", "feature_fetch"):
        assert all(phase not in p for p in replicated.bytes_per_rank)
        assert all(p[phase]["recv"] > 0 for p in partitioned.bytes_per_rank)


def test_cli_trains_sampled_on_partitioned_ranks(capsys) -> None:
    code = main(["train", "--task", "link", "--mode", "minibatch", "--dataset",
                 "sbm:nodes=64,blocks=4,degree=5", "--nprocs", "2", "--topology",
                 "partitioned", "--fanouts", "3,2", "--batch-size", "32", "--bulk", "2",
                 "--epochs", "2", "--hidden", "8", "--out-channels", "4", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["mode"] == "minibatch" and result["topology"] == "partitioned"
    assert result["model"] == "sage" and result["epochs_run"] == 2
    assert 0.0 <= result["test_auc"] <= 1.0
    assert all(r["feature_fetch"]["recv"] > 0 for r in result["comm_per_rank"])


def test_refusals() -> None:
    with pytest.raises(InvalidValueError, match="GraphSAGE"):
        LinkSampledRequest(LinkRequest(model="gcn"))
    with pytest.raises(InvalidValueError, match="fan-outs"):
        LinkSampledRequest(LinkRequest(model="sage"), fanouts=(5,))
