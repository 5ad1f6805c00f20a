"""tracking.chain_kernel against the numpy, scipy and Python forms it replaces: equal bit
for bit (component numbers, the triplet greedy, triplet misfits), and refusing indices
outside the event."""

from __future__ import annotations

import numpy as np
import pytest

from sparsegnn.data.paths import BUNDLED
from sparsegnn.sparse import native
from sparsegnn.tracking import chain_kernel, triplets
from sparsegnn.tracking.chains import label_components
from sparsegnn.tracking.events import read_event
from sparsegnn.tracking.graph_construction import truth_graph
from sparsegnn.tracking.tracks import HitGeometry

pytestmark = pytest.mark.skipif(chain_kernel.library() is None,
                                reason="the track-building kernels did not build here")


def both(fn, *args):
    fast = fn(*args)
    with native.disabled():
        return fast, fn(*args)


@pytest.mark.parametrize("min_hits", [1, 2, 3, 6])
def test_components_are_numbered_as_scipy_numbers_them(min_hits: int) -> None:
    rng = np.random.default_rng(min_hits)
    numbered = dropped = 0
    for n, m in ((1, 0), (50, 0), (200, 120), (2000, 1500), (500, 2000)):
        src, dst = rng.integers(0, n, (2, m))  # self-loops and repeats included
        fast, plain = both(label_components, src, dst, n, min_hits)
        assert np.array_equal(fast, plain)
        numbered, dropped = numbered + int(plain.max()) + 1, dropped + int((plain < 0).sum())
    assert numbered > 10 and dropped > 100


def test_the_triplet_greedy_takes_what_the_python_loop_takes() -> None:
    rng = np.random.default_rng(0)
    n = 300
    a, b, c = rng.integers(0, n, (3, 5000))
    fast = chain_kernel.triplet_greedy(a, b, c, n)
    assert np.array_equal(fast, triplets._greedy(a, b, c, n))
    assert (fast >= 0).sum() > 10


def test_triplet_misfits_equal_numpys_bit_for_bit() -> None:
    """Every two-edge path of the sample event's truth graph and random triplets (short
    segments, repeated hits, both segments short) through the C parts and numpy's
    arctangents, against numpy's form."""
    ev = read_event(BUNDLED / "trackml_sample", "event000000001")
    graph = truth_graph(ev)
    positions = HitGeometry.from_event(ev).positions
    first, second = triplets._edge_pairs(*graph.edge_index, graph.num_nodes)
    src, dst = graph.edge_index
    rng = np.random.default_rng(0)
    rand = rng.integers(0, ev.num_hits, (3, 20000))
    for a, b, c in ((src[first], dst[first], dst[second]), tuple(rand),
                    (rand[0], rand[0], rand[1]), (rand[0], rand[1], rand[1]),
                    (rand[0], rand[0], rand[0])):
        fast, plain = both(triplets._triplet_misfit, positions, a, b, c)
        assert np.array_equal(fast, plain, equal_nan=True)
    assert first.size > 1000 and (plain == 0).all()  # the last set: both segments short


def test_the_chain_kernels_refuse_hits_outside_the_event() -> None:
    with pytest.raises(IndexError, match="outside"):
        chain_kernel.label_components(np.array([0]), np.array([5]), 5, 2)
    with pytest.raises(IndexError, match="outside"):
        chain_kernel.triplet_greedy(np.array([0]), np.array([-1]), np.array([2]), 5)
    with pytest.raises(IndexError, match="outside"):
        chain_kernel.triplet_parts(np.zeros((4, 3)), np.array([0, 1]), np.array([1]),
                                   np.array([2]), 15.0, 1.0, 1.0)
    label = np.zeros(5, dtype=np.int64)
    with pytest.raises(IndexError, match="outside"):
        chain_kernel.link_candidates(np.array([0]), np.array([5]), np.ones(1), 0.0,
                                     np.zeros(1, bool), label, label, label)
    with pytest.raises(IndexError, match="outside"):
        chain_kernel.bridge_candidates(np.array([0]), np.array([1]), np.zeros(5), 0.3,
                                       label - 1, np.ones(1, bool), np.zeros(5))


def test_link_candidates_are_numpys() -> None:
    rng = np.random.default_rng(2)
    n, m = 400, 5000
    src, dst = rng.integers(0, n, (2, m))
    score = rng.uniform(0, 1, m)
    score[::50] = np.nan
    chosen = rng.uniform(size=m) < 0.2
    out_of, in_of = (np.where(rng.uniform(size=n) < 0.5, -1, rng.integers(0, n, n))
                     for _ in range(2))
    label = np.where(rng.uniform(size=n) < 0.4, -1, rng.integers(0, 30, n))
    fast = chain_kernel.link_candidates(src, dst, score, 0.3, chosen, out_of, in_of, label)
    plain = np.flatnonzero((score >= 0.3) & ~chosen & (out_of[src] < 0) & (in_of[dst] < 0)
                           & ((label[src] >= 0) | (label[dst] >= 0))
                           & (label[src] != label[dst]))
    assert plain.size > 50 and np.array_equal(fast, plain)


def test_bridge_candidates_are_numpys_in_numpys_order() -> None:
    """Ends and starts all round the ring (phi = +-pi included), chains long and short."""
    rng = np.random.default_rng(3)
    n = 3000
    positions = rng.normal(size=(n, 3)) * [300.0, 300.0, 1000.0]
    positions[:20, 1] = 0.0  # on the -x axis: phi = +-pi
    positions[:20, 0] = -np.abs(positions[:20, 0])
    label = rng.integers(0, 200, n)
    short = rng.uniform(size=200) < 0.3
    ends, starts = np.sort(rng.choice(n, 600, replace=False)), rng.choice(n, 700)
    fast = triplets._bridge_candidates(positions, ends, starts, label, short)
    with native.disabled():
        plain = triplets._bridge_candidates(positions, ends, starts, label, short)
    assert plain[0].size > 100
    assert all(np.array_equal(f, p) for f, p in zip(fast, plain, strict=True))


@pytest.mark.parametrize("min_layers", [2, 4, 7])
def test_the_layer_requirement_is_numpys(min_layers: int) -> None:
    from sparsegnn.tracking.chains import with_layers

    rng = np.random.default_rng(min_layers)
    n = 4000
    positions = np.zeros((n, 3))
    layer = rng.choice([0, 3, 17, 20, 21, 9002, 9004, 9006, 12010, 12012], n)
    labels = np.where(rng.uniform(size=n) < 0.3, -1, rng.integers(0, 400, n))
    labels[labels == 7] = -1  # a label with no hits
    geometry = HitGeometry(positions, layer)
    fast, plain = both(with_layers, labels, geometry, min_layers)
    assert np.array_equal(fast, plain)
    assert (plain >= 0).any() and ((labels >= 0) & (plain < 0)).any()
    empty = np.full(5, -1)
    assert np.array_equal(with_layers(empty, HitGeometry(np.zeros((5, 3)), np.zeros(5, int)),
                                      min_layers), empty)
