"""Property-based fuzzing of every loader (issue 27, deliverable 7).

Each loader gets a few hundred generated inputs: valid graphs, then the same files
truncated, with flipped or inserted bytes, arrays of the wrong dtype or shape, or random
text. The property is the same everywhere: an input either loads, and then equals what
was saved when it was valid, or is refused with a :class:`SparseGNNError` subclass, never
another exception. ``derandomize=True`` makes every CI run try the same examples.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sparsegnn.data import (
    GraphData,
    load_graph,
    read_edge_list,
    read_graph,
    read_scipy_npz,
    sbm,
)
from sparsegnn.data.io import save_graph
from sparsegnn.distributed.layout.block_partition import BlockPartition
from sparsegnn.distributed.layout.grid import grid_shape
from sparsegnn.distributed.layout.row_blocks import (
    check_row_blocks,
    read_row_block,
    write_row_blocks,
)
from sparsegnn.distributed.layout.shard import MANIFEST, check_partition, read_shard, write_shards
from sparsegnn.errors import SparseGNNError
from sparsegnn.sparse import CSRMatrix

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder per module, reused by every example (function-scoped tmp_path is not
    reset between hypothesis examples)."""
    return tmp_path_factory.mktemp("fuzz")


def loads_or_refuses(load: Callable[[], Any]) -> Any:
    """``load()``'s result, or None when it raised an error of the hierarchy; any other
    exception fails the test with the input that caused it."""
    try:
        return load()
    except SparseGNNError:
        return None


# ---------------------------------------------------------------------- strategies
@st.composite
def graphs(draw: st.DrawFn) -> GraphData:
    """Small valid graphs with every optional field sometimes present."""
    n = draw(st.integers(0, 12))
    e = draw(st.integers(0, 20)) if n else 0
    ids = st.integers(0, max(n - 1, 0))
    edge_index = torch.tensor([draw(st.lists(ids, min_size=e, max_size=e)) for _ in range(2)],
                              dtype=torch.int64).reshape(2, e)
    g = GraphData(edge_index=edge_index, num_nodes=n, name=draw(st.text(max_size=8)),
                  meta={"k": draw(st.integers())})
    if draw(st.booleans()):
        dtype = draw(st.sampled_from([np.float32, np.float64]))
        g.x = torch.from_numpy(draw(hnp.arrays(dtype, (n, draw(st.integers(0, 3))),
                                               elements=st.floats(-1e6, 1e6, width=32))))
    if draw(st.booleans()):
        g.y = torch.tensor(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)),
                           dtype=torch.int64)
    if draw(st.booleans()):
        g.train_mask = torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n)),
                                    dtype=torch.bool)
    if draw(st.booleans()):
        g.texts = draw(st.lists(st.text(max_size=6), min_size=n, max_size=n))
    return g


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` truncated, with bytes flipped or inserted, or replaced by random bytes."""
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "random", "same"]))
    if kind == "truncate":
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    if kind == "random":
        return draw(st.binary(max_size=256))
    if kind == "same":
        return data
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(out) - 1))
        if kind == "flip":
            out[at] ^= draw(st.integers(1, 255))
        else:
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(out)


def _same_graph(a: GraphData, b: GraphData) -> None:
    assert a.num_nodes == b.num_nodes and torch.equal(a.edge_index, b.edge_index)
    for key in ("x", "y", "train_mask"):
        left, right = getattr(a, key), getattr(b, key)
        assert (left is None) == (right is None)
        if left is not None:
            assert torch.equal(left, right)
    assert a.texts == b.texts and a.name == b.name and a.meta == b.meta


# ---------------------------------------------------------------------- our .npz
@FUZZ
@given(g=graphs())
def test_load_graph_round_trips_valid_graphs(scratch: Path, g: GraphData) -> None:
    path = save_graph(g, scratch / "valid.npz")
    _same_graph(load_graph(path), g)


@FUZZ
@given(data=st.data(), g=graphs(), compress=st.booleans())
def test_load_graph_mutated_bytes(scratch: Path, data: st.DataObject, g: GraphData,
                                  compress: bool) -> None:
    original = save_graph(g, scratch / "original.npz", compress=compress).read_bytes()
    blob = data.draw(mutated(original))
    path = scratch / "mutated.npz"
    path.write_bytes(blob)
    loaded = loads_or_refuses(lambda: load_graph(path))
    if blob == original:
        assert loaded is not None
        _same_graph(loaded, g)


_DTYPES = st.sampled_from(["int64", "int32", "uint8", "uint64", "float32", "float64", "bool",
                           "complex64", "<U3", "|S2"])
_ARRAYS = hnp.arrays(_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
_KEYS = ["edge_index", "num_nodes", "x", "y", "train_mask", "val_mask", "name", "name_utf8",
         "meta", "format_version", "texts_utf8", "texts_offsets", "class_names_utf8",
         "class_names_offsets"]


@FUZZ
@given(arrays=st.dictionaries(st.sampled_from(_KEYS), _ARRAYS, max_size=8))
def test_load_graph_wrong_dtypes_and_shapes(scratch: Path, arrays: dict[str, np.ndarray]) -> None:
    path = scratch / "arrays.npz"
    np.savez(path, **arrays)
    g = loads_or_refuses(lambda: load_graph(path))
    if g is not None:  # whatever loads obeys the invariants every consumer relies on
        assert g.edge_index.dtype == torch.int64 and g.edge_index.shape[0] == 2
        if g.num_edges:
            assert int(g.edge_index.min()) >= 0 and int(g.edge_index.max()) < g.num_nodes
        if g.x is not None:
            assert g.x.shape[0] == g.num_nodes and bool(torch.isfinite(g.x).all())
        if g.y is not None:
            assert g.y.shape == (g.num_nodes,) and (g.y >= 0).all()


# ---------------------------------------------------------------------- edge-list text
_TOKENS = st.sampled_from(["0", "1", "7", "-1", "1.5", "2e3", "nan", "a", "src", "#", ",", " ",
                           "\t", "\n", "\r\n", "99999999999999999999", "9223372036854775807",
                           "\x00", "é", "\ufeff"])


@FUZZ
@given(tokens=st.lists(_TOKENS, max_size=40))
def test_read_edge_list_random_text(scratch: Path, tokens: list[str]) -> None:
    path = scratch / "edges.txt"
    path.write_text("".join(tokens), encoding="utf-8")
    for undirected in (True, False):
        g = loads_or_refuses(lambda u=undirected: read_edge_list(path, undirected=u))
        if g is not None and g.num_edges:
            assert int(g.edge_index.min()) >= 0 and int(g.edge_index.max()) < g.num_nodes


_IDS = st.one_of(st.integers(0, 50), st.integers(2**31, 2**62), st.integers(2**62, 2**63 - 2))


@FUZZ
@given(pairs=st.lists(st.tuples(_IDS, _IDS), max_size=12), sep=st.sampled_from([" ", "\t", ","]),
       directed=st.booleans())
def test_read_edge_list_is_exact(scratch: Path, pairs: list[tuple[int, int]], sep: str,
                                 directed: bool) -> None:
    path = scratch / "pairs.txt"
    path.write_text("".join(f"{u}{sep}{v}\n" for u, v in pairs))
    g = read_edge_list(path, undirected=not directed)
    edges = {(u, v) for u, v in pairs if u != v}
    if not directed:
        edges |= {(v, u) for u, v in edges}
    assert list(map(tuple, g.edge_index.T.tolist())) == sorted(edges)
    assert g.num_nodes == (max(max(p) for p in pairs) + 1 if pairs else 0)


# ---------------------------------------------------------------------- scipy .npz
def _scipy_bytes(n: int, seed: int) -> bytes:
    buf = io.BytesIO()
    sp.save_npz(buf, sp.random(n, n, density=0.3, format="csr", random_state=seed))
    return buf.getvalue()


@FUZZ
@given(data=st.data(), n=st.integers(1, 6), seed=st.integers(0, 3))
def test_read_scipy_npz_mutated_bytes(scratch: Path, data: st.DataObject, n: int,
                                      seed: int) -> None:
    original = _scipy_bytes(n, seed)
    blob = data.draw(mutated(original))
    path = scratch / "adj.npz"
    path.write_bytes(blob)
    g = loads_or_refuses(lambda: read_scipy_npz(path))
    if blob == original:
        adj = sp.load_npz(io.BytesIO(original)).tocoo()
        keep = adj.row != adj.col
        edges = set(zip(adj.row[keep].tolist(), adj.col[keep].tolist(), strict=True))
        edges |= {(v, u) for u, v in edges}
        assert g is not None and list(map(tuple, g.edge_index.T.tolist())) == sorted(edges)


def test_a_member_flagged_encrypted_is_refused(tmp_path: Path) -> None:
    """A flipped flag bit the fuzzer found: zipfile then asks for a password with a
    RuntimeError, which leaked as a traceback instead of one line naming the file."""
    blob = bytearray(_scipy_bytes(3, 0))
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = blob.find(signature)
        blob[start + flags_at] |= 0x01  # general purpose bit 0: encrypted
    path = tmp_path / "adj.npz"
    path.write_bytes(bytes(blob))
    with pytest.raises(SparseGNNError, match=r"adj\.npz"):
        read_scipy_npz(path)


_SCIPY_KEYS = ["format", "shape", "data", "indices", "indptr", "row", "col"]


@FUZZ
@given(arrays=st.dictionaries(st.sampled_from(_SCIPY_KEYS), _ARRAYS, min_size=3, max_size=6),
       fmt=st.sampled_from([b"csr", b"csc", b"coo", b"bsr", b"dia", b"xyz"]))
def test_read_scipy_npz_wrong_arrays(scratch: Path, arrays: dict[str, np.ndarray],
                                     fmt: bytes) -> None:
    arrays.setdefault("format", np.asarray(fmt))
    path = scratch / "scipy_arrays.npz"
    np.savez(path, **arrays)
    loads_or_refuses(lambda: read_scipy_npz(path))
    loads_or_refuses(lambda: read_graph(path))


# ---------------------------------------------------------------------- read_graph
@FUZZ
@given(blob=st.one_of(st.binary(max_size=200), st.just(b"PK\x03\x04"), st.just(b"PK\x05\x06")),
       suffix=st.sampled_from([".npz", ".txt", "", ".graph"]))
def test_read_graph_any_bytes_any_name(scratch: Path, blob: bytes, suffix: str) -> None:
    path = scratch / f"any{suffix}"
    path.write_bytes(blob)
    loads_or_refuses(lambda: read_graph(path))


@FUZZ
@given(g=graphs(), suffix=st.sampled_from([".graph", "", ".bin"]))
def test_read_graph_recognises_our_format_by_content(scratch: Path, g: GraphData,
                                                     suffix: str) -> None:
    path = save_graph(g, scratch / f"saved{suffix}")
    _same_graph(read_graph(path), g)


# ---------------------------------------------------------------------- partitions
@pytest.fixture(scope="module")
def partition(scratch: Path) -> Path:
    """A 2-rank 1d partition of a 6-vertex path graph, written once."""
    n = 6
    src = torch.arange(n - 1)
    adj = CSRMatrix.from_coo(torch.cat([src, src + 1]), torch.cat([src + 1, src]),
                             shape=(n, n), symmetric=True)
    rows = {"x": torch.rand(n, 3), "y": torch.arange(n) % 2,
            **{f"{s}_mask": torch.ones(n, dtype=torch.bool) for s in ("train", "val", "test")}}
    return write_shards(scratch / "part", "path6", adj, rows, BlockPartition((0, 3, 6)),
                        grid_shape("1d", 2), "gcn")


def _copy(partition: Path, scratch: Path) -> Path:
    out = scratch / "part_copy"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(partition, out)
    return out


@FUZZ
@given(data=st.data(), rank=st.integers(0, 1))
def test_rank_file_mutated_bytes(scratch: Path, partition: Path, data: st.DataObject,
                                 rank: int) -> None:
    folder = _copy(partition, scratch)
    file = folder / f"rank{rank}.npz"
    original = file.read_bytes()
    blob = data.draw(mutated(original))
    file.write_bytes(blob)
    shard = loads_or_refuses(lambda: read_shard(folder, rank))
    loads_or_refuses(lambda: check_partition(folder))
    if blob == original:
        assert shard is not None and shard.x.shape == (3, 3)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10) | st.text(max_size=4),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=10)


@FUZZ
@given(data=st.data())
def test_manifest_edits(scratch: Path, partition: Path, data: st.DataObject) -> None:
    folder = _copy(partition, scratch)
    manifest = json.loads((folder / MANIFEST).read_text())
    kind = data.draw(st.sampled_from(["field", "drop", "truncate", "random"]))
    if kind == "field":
        manifest[data.draw(st.sampled_from(sorted(manifest)))] = data.draw(_JSON)
        text = json.dumps(manifest)
    elif kind == "drop":
        del manifest[data.draw(st.sampled_from(sorted(manifest)))]
        text = json.dumps(manifest)
    elif kind == "truncate":
        full = json.dumps(manifest)
        text = full[:data.draw(st.integers(0, len(full) - 1))]
    else:
        text = json.dumps(data.draw(_JSON))
    (folder / MANIFEST).write_text(text)
    for rank in (0, 1):
        loads_or_refuses(lambda r=rank: read_shard(folder, r))
    loads_or_refuses(lambda: check_partition(folder))


# ---------------------------------------------------------------------- row blocks
@pytest.fixture(scope="module")
def row_blocks(scratch: Path) -> Path:
    """A 2-block minibatch partition of a small generated graph, written once."""
    return Path(write_row_blocks(sbm(12, 2, 3, num_features=3, seed=0), scratch / "rows", 2)
                ["out"])


@FUZZ
@given(data=st.data(), name=st.sampled_from(["block0.npz", "block1.npz", "vertices.npz"]))
def test_row_block_file_mutated_bytes(scratch: Path, row_blocks: Path, data: st.DataObject,
                                      name: str) -> None:
    folder = _copy(row_blocks, scratch)
    file = folder / name
    original = file.read_bytes()
    blob = data.draw(mutated(original))
    file.write_bytes(blob)
    blocks = [loads_or_refuses(lambda j=j: read_row_block(folder, j)) for j in (0, 1)]
    loads_or_refuses(lambda: check_row_blocks(folder))
    if blob == original:
        assert all(b is not None and b.x.shape == (6, 3) for b in blocks)


@FUZZ
@given(data=st.data())
def test_row_block_manifest_edits(scratch: Path, row_blocks: Path, data: st.DataObject) -> None:
    folder = _copy(row_blocks, scratch)
    manifest = json.loads((folder / MANIFEST).read_text())
    key = data.draw(st.sampled_from(sorted(manifest)))
    if data.draw(st.booleans()):
        manifest[key] = data.draw(_JSON)
    else:
        del manifest[key]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    for j in (0, 1):
        loads_or_refuses(lambda j=j: read_row_block(folder, j))
    loads_or_refuses(lambda: check_row_blocks(folder))
