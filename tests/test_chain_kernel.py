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
