"""sparsegnn.data: bundled datasets, text features, generators and the .npz format."""

from __future__ import annotations

import hashlib
import lzma
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sparsegnn.data import (
    GraphData,
    HashedTfidf,
    convert,
    data_root,
    from_spec,
    load_any,
    load_citeseer_text,
    load_cora,
    load_graph,
    read_edge_list,
    read_graph,
    rmat,
    save_graph,
    sbm,
    stratified_split,
    tokenize,
    uniform_random,
)
from sparsegnn.data import io as data_io
from sparsegnn.errors import DataFormatError, InvalidValueError


def assert_clean_undirected(g: GraphData) -> None:
    """Both directions stored, no self-loops, no duplicates, ids in range."""
    src, dst = g.edge_index
    assert g.edge_index.dtype == torch.int64
    assert not (src == dst).any()
    keys = src * g.num_nodes + dst
    assert keys.unique().numel() == keys.numel()
    reverse = dst * g.num_nodes + src
    assert torch.equal(keys.sort().values, reverse.sort().values)
    if g.num_edges:
        assert int(g.edge_index.min()) >= 0 and int(g.edge_index.max()) < g.num_nodes


@pytest.fixture(scope="module")
def cora() -> GraphData:
    return load_cora()


@pytest.fixture(scope="module")
def citeseer() -> GraphData:
    return load_citeseer_text(featurizer=HashedTfidf(n_features=256, min_df=2))


# ---------------------------------------------------------------------- paths
def test_data_root_prefers_flag_then_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag, env = tmp_path / "flag", tmp_path / "env"
    flag.mkdir()
    env.mkdir()
    monkeypatch.setenv("SPARSEGNN_DATA", str(env))
    assert data_root(str(flag)) == flag
    assert data_root() == env


def test_data_root_walks_up_from_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARSEGNN_DATA", raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "repo" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "repo" / "sub")
    assert data_root() == tmp_path / "shared" / "data"


def test_data_root_missing_names_path(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="nowhere"):
        data_root(tmp_path / "nowhere")


# ---------------------------------------------------------------------- cora
def test_cora_counts(cora: GraphData) -> None:
    assert (cora.num_nodes, cora.num_edges) == (2708, 10556)
    assert (cora.num_features, cora.num_classes) == (1433, 7)
    assert cora.x is not None and cora.x.dtype == torch.float32
    assert set(cora.x.unique().tolist()) == {0.0, 1.0}
    assert cora.class_names is not None and cora.class_names[2] == "Neural_Networks"
    assert_clean_undirected(cora)
    assert cora.y is not None
    assert cora.y.bincount().tolist() == [351, 217, 418, 818, 426, 298, 180]


def test_cora_split(cora: GraphData) -> None:
    train, val, test = cora.train_mask, cora.val_mask, cora.test_mask
    assert train is not None and val is not None and test is not None
    assert (int(train.sum()), int(val.sum()), int(test.sum())) == (140, 500, 1000)
    assert train[:140].all() and val[140:640].all()
    assert int(test.nonzero().min()) == 1708
    assert not (train & val).any() and not (val & test).any() and not (train & test).any()


def _cora_copy(tmp_path: Path) -> Path:
    """Cora's raw Planetoid files in a folder of their own, whether the data root holds
    them raw (shared/data) or xz-compressed (the bundle in a clone alone)."""
    src = data_root() / "cora"
    dst = tmp_path / "cora"
    dst.mkdir()
    for f in src.glob("ind.cora.*"):
        if f.suffix == ".xz":
            (dst / f.stem).write_bytes(lzma.decompress(f.read_bytes()))
        else:
            shutil.copyfile(f, dst / f.name)
    return dst


def test_cora_missing_file_is_named(tmp_path: Path) -> None:
    folder = _cora_copy(tmp_path)
    (folder / "ind.cora.tx").unlink()
    with pytest.raises(DataFormatError, match=r"ind\.cora\.tx"):
        load_cora(tmp_path)


def test_cora_truncated_file_is_named(tmp_path: Path) -> None:
    folder = _cora_copy(tmp_path)
    graph = folder / "ind.cora.graph"
    graph.write_bytes(graph.read_bytes()[:1000])
    with pytest.raises(DataFormatError, match=r"ind\.cora\.graph"):
        load_cora(folder)


class _Exploit:
    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (shutil.disk_usage, ())  # any global outside the allow-list


def test_cora_refuses_unexpected_globals(tmp_path: Path) -> None:
    folder = _cora_copy(tmp_path)
    (folder / "ind.cora.y").write_bytes(pickle.dumps(_Exploit(), protocol=2))
    with pytest.raises(DataFormatError, match=r"ind\.cora\.y.*refusing"):
        load_cora(folder)


# ---------------------------------------------------------------------- citeseer
def test_citeseer_counts(citeseer: GraphData) -> None:
    assert (citeseer.num_nodes, citeseer.num_edges // 2, citeseer.num_classes) == (3186, 4225, 6)
    assert_clean_undirected(citeseer)
    assert citeseer.texts is not None and len(citeseer.texts) == 3186
    assert citeseer.node_ids is not None and citeseer.node_ids[0] == "norman00argument"
    assert citeseer.class_names == ["AI", "Agents", "DB", "HCI", "IR", "ML"]
    assert citeseer.y is not None and citeseer.y.bincount().tolist() == [239, 562, 685, 490,
                                                                         641, 569]
    assert citeseer.x is not None and citeseer.x.shape == (3186, 256)
    masks = torch.stack([citeseer.train_mask, citeseer.val_mask, citeseer.test_mask])
    assert torch.equal(masks.sum(0), torch.ones(3186, dtype=torch.int64))
    assert int(masks[0].sum()) == pytest.approx(0.6 * 3186, abs=6)


def test_citeseer_without_features() -> None:
    g = load_citeseer_text(featurize=False)
    assert g.x is None and g.num_nodes == 3186


def test_citeseer_bad_records_named(tmp_path: Path) -> None:
    folder = tmp_path / "citeseer_text"
    folder.mkdir()
    (folder / "citeseer_texts.txt").write_text("a\ntext a\nML\nb\ntext b\n")
    (folder / "citeseer.cites").write_text("a\tb\n")
    with pytest.raises(DataFormatError, match=r"citeseer_texts\.txt"):
        load_citeseer_text(tmp_path)


def test_stratified_split_per_class() -> None:
    y = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    train, val, test = stratified_split(y, (0.6, 0.2, 0.2), seed=3)
    assert torch.equal(train.int() + val.int() + test.int(), torch.ones(100, dtype=torch.int32))
    for c, n in enumerate((50, 30, 20)):
        assert int(train[y == c].sum()) == round(0.6 * n)
        assert int(val[y == c].sum()) == round(0.2 * n)
    again = stratified_split(y, (0.6, 0.2, 0.2), seed=3)
    other = stratified_split(y, (0.6, 0.2, 0.2), seed=4)
    assert torch.equal(again[0], train) and not torch.equal(other[0], train)


def test_stratified_split_rejects_bad_fractions() -> None:
    with pytest.raises(InvalidValueError):
        stratified_split(torch.zeros(4, dtype=torch.int64), (0.8, 0.5))


# ---------------------------------------------------------------------- text features
DOCS = ["Graph neural networks on sparse graphs.", "Sparse matrix products, sparse graphs!",
        "", "Neural networks", "graphs sparse"]


def test_tfidf_shape_and_norm() -> None:
    x = HashedTfidf(n_features=64).fit_transform(DOCS)
    assert sp.issparse(x) and x.format == "csr" and x.dtype == np.float32
    assert x.shape == (5, 64)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1))).ravel()
    np.testing.assert_allclose(norms, [1, 1, 0, 1, 1], atol=1e-6)


def test_tfidf_hash_is_stable_blake2b() -> None:
    """Columns come from blake2b of the token, never from the salted builtin hash."""
    model = HashedTfidf(n_features=1000, ngram_range=(1, 1)).fit(["graph"])
    col = model.transform(["graph"]).indices.tolist()
    digest = hashlib.blake2b(b"graph", digest_size=8).digest()
    assert col == [int.from_bytes(digest, "little") % 1000]


def test_tfidf_chunking_and_iter_agree() -> None:
    whole = HashedTfidf(n_features=128).fit_transform(DOCS)
    small = HashedTfidf(n_features=128, chunk_size=2)
    chunked = small.fit_transform(DOCS)
    assert (whole != chunked).nnz == 0
    blocks = list(small.transform_iter([DOCS[:3], DOCS[3:]]))
    assert [b.shape[0] for b in blocks] == [3, 2]
    assert (sp.vstack(blocks) != whole).nnz == 0


def test_tfidf_bigrams_are_ordered_and_min_df_drops() -> None:
    model = HashedTfidf(n_features=2**16, ngram_range=(2, 2)).fit(["aa bb", "bb aa"])
    a, b = model.transform(["aa bb", "bb aa"])
    assert a.indices.tolist() != b.indices.tolist()
    rare = HashedTfidf(n_features=2**16, ngram_range=(1, 1), min_df=2).fit(["aa bb", "aa cc"])
    assert rare.transform(["aa bb cc"]).nnz == 1
    assert tokenize("Ünïcode_x, A b2 c") == ["ünïcode", "b2"]


def test_tfidf_errors() -> None:
    with pytest.raises(InvalidValueError, match="not fitted"):
        HashedTfidf().transform(["x"])
    with pytest.raises(InvalidValueError, match="single str"):
        HashedTfidf().fit("a text, not a list")


# ---------------------------------------------------------------------- generators
def test_rmat_sizes_and_determinism() -> None:
    g = rmat(10, edge_factor=8, seed=1)
    assert g.num_nodes == 1024 and 0 < g.num_edges <= 2 * 8 * 1024
    assert_clean_undirected(g)
    assert torch.equal(g.edge_index, rmat(10, edge_factor=8, seed=1).edge_index)
    assert not torch.equal(g.edge_index, rmat(10, edge_factor=8, seed=2).edge_index)


def test_rmat_unshuffled_hubs_sit_at_low_ids() -> None:
    g = rmat(10, edge_factor=8, shuffle=False)
    deg = torch.bincount(g.edge_index[0], minlength=g.num_nodes)
    assert int(deg.argmax()) == 0
    shuffled = torch.bincount(rmat(10, edge_factor=8).edge_index[0], minlength=1024)
    assert int(shuffled.argmax()) != 0


def test_rmat_directed_and_features() -> None:
    g = rmat(8, edge_factor=4, undirected=False, num_features=3)
    src, dst = g.edge_index
    assert not (src == dst).any()
    keys = src * 256 + dst
    assert keys.unique().numel() == keys.numel()
    assert g.x is not None and g.x.shape == (256, 3)


def test_sbm_structure_is_learnable() -> None:
    g = sbm(4000, 8, avg_degree=12, mixing=0.1, num_features=16, seed=5)
    assert_clean_undirected(g)
    assert g.y is not None and g.x is not None and g.x.shape == (4000, 16)
    src, dst = g.edge_index
    assert (g.y[src] == g.y[dst]).float().mean().item() == pytest.approx(0.9, abs=0.03)
    assert g.num_edges / g.num_nodes == pytest.approx(12, rel=0.05)
    assert not torch.equal(g.y, g.y.sort().values)  # shuffled ids
    assert int(g.train_mask.sum()) == 2400 and int(g.test_mask.sum()) == 800
    # One round of neighbour averaging makes a nearest-class-mean classifier near-perfect.
    agg = torch.zeros_like(g.x).index_add_(0, src, g.x[dst]) + g.x
    train = g.train_mask
    means = torch.stack([agg[train & (g.y == k)].mean(0) for k in range(8)])
    pred = torch.cdist(agg[g.test_mask], means).argmin(1)
    assert (pred == g.y[g.test_mask]).float().mean().item() > 0.9


def test_sbm_unshuffled_blocks_are_contiguous() -> None:
    g = sbm(100, 4, avg_degree=4, shuffle=False)
    assert g.y is not None and torch.equal(g.y, torch.arange(4).repeat_interleave(25))
    assert torch.equal(g.edge_index, sbm(100, 4, avg_degree=4, shuffle=False).edge_index)


def test_degree_corrected_sbm_has_hubs_and_keeps_communities() -> None:
    """``powerlaw`` skews degrees (hubs far above the uniform SBM's maximum) but the
    edges still stay mostly inside blocks."""
    plain = sbm(4000, 8, avg_degree=12, mixing=0.1, seed=5)
    skewed = sbm(4000, 8, avg_degree=12, mixing=0.1, powerlaw=2.5, seed=5)
    def max_degree(g: GraphData) -> int:
        return int(torch.bincount(g.edge_index[0], minlength=g.num_nodes).max())
    assert max_degree(skewed) > 5 * max_degree(plain)
    src, dst = skewed.edge_index
    assert (skewed.y[src] == skewed.y[dst]).float().mean() > 0.85
    assert "powerlaw=2.5" in skewed.name
    with pytest.raises(InvalidValueError):
        sbm(100, 4, avg_degree=4, powerlaw=0.5)


def test_uniform_random() -> None:
    g = uniform_random(2000, avg_degree=6, seed=0)
    assert_clean_undirected(g)
    assert g.num_edges / g.num_nodes == pytest.approx(6, rel=0.02)
    assert g.x is None and g.y is None


def test_generator_argument_checks() -> None:
    with pytest.raises(InvalidValueError):
        rmat(4, a=0.9, b=0.2)
    with pytest.raises(InvalidValueError):
        sbm(10, 20, avg_degree=2)


def test_from_spec() -> None:
    g = from_spec("rmat:8")
    assert g.num_nodes == 256 and g.meta["edge_factor"] == 16
    assert torch.equal(from_spec("rmat:scale=8,edge_factor=16,seed=0").edge_index, g.edge_index)
    assert not torch.equal(from_spec("rmat:8", seed=9).edge_index, g.edge_index)
    s = from_spec("sbm:nodes=2^9,blocks=4,degree=6,mixing=0.2,features=5")
    assert (s.num_nodes, s.num_classes, s.num_features) == (512, 4, 5)
    assert from_spec("uniform:nodes=1e3,degree=4").num_nodes == 1000


@pytest.mark.parametrize("spec", ["rmat", "rmat:scale=x", "rmat:8,bogus=1", "sbm:nodes=10",
                                  "mesh:10", "uniform:nodes=10,degree"])
def test_from_spec_errors(spec: str) -> None:
    with pytest.raises(DataFormatError, match="spec"):
        from_spec(spec)


# ---------------------------------------------------------------------- .npz format
def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    g = sbm(300, 3, avg_degree=4, num_features=4)
    g.texts = ["héllo", "", *(f"t{i}" for i in range(298))]
    g.node_ids = [str(i) for i in range(300)]
    path = save_graph(g, tmp_path / "g.npz", compress=True)
    back = load_graph(path)
    for key in ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(back, key), getattr(g, key)), key
    assert (back.name, back.num_nodes, back.meta) == (g.name, g.num_nodes, g.meta)
    assert back.texts == g.texts and back.node_ids == g.node_ids
    assert back.class_names == g.class_names
    assert [p.name for p in tmp_path.iterdir()] == ["g.npz"]  # no temporary left behind


def test_round_trip_cora(cora: GraphData, tmp_path: Path) -> None:
    back = load_graph(save_graph(cora, tmp_path / "cora.npz"))
    assert back.counts() == cora.counts()
    assert back.x is not None and cora.x is not None and torch.equal(back.x, cora.x)


def test_failed_save_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_graph(uniform_random(10, 2), tmp_path / "g.npz")
    before = path.read_bytes()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(data_io.np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        save_graph(uniform_random(20, 2), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["g.npz"]


def _write(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def _corrupt_files(tmp_path: Path) -> dict[str, Path]:
    good = save_graph(uniform_random(50, 4, num_features=2), tmp_path / "good.npz")
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    not_zip = tmp_path / "text.npz"
    not_zip.write_text("hello")
    npy = tmp_path / "npy.npz"
    with npy.open("wb") as f:
        np.save(f, np.arange(3))
    edges = np.array([[0, 1], [1, 0]])
    n = np.asarray(3)
    return {
        "missing": tmp_path / "missing.npz",
        "truncated": truncated,
        "not_zip": not_zip,
        "npy": npy,
        "shape": _write(tmp_path / "shape.npz", edge_index=np.zeros((3, 2), np.int64),
                        num_nodes=n),
        "float_ids": _write(tmp_path / "float.npz", edge_index=edges.astype(float),
                            num_nodes=n),
        "range": _write(tmp_path / "range.npz", edge_index=np.array([[0, 5], [5, 0]]),
                        num_nodes=n),
        "negative": _write(tmp_path / "negative.npz", edge_index=-edges, num_nodes=n),
        "mask_length": _write(tmp_path / "mask.npz", edge_index=edges, num_nodes=n,
                              train_mask=np.ones(2, bool)),
        "x_rows": _write(tmp_path / "x.npz", edge_index=edges, num_nodes=n,
                         x=np.ones((4, 2), np.float32)),
        "no_edges": _write(tmp_path / "no_edges.npz", num_nodes=n),
        "version": _write(tmp_path / "version.npz", edge_index=edges, num_nodes=n,
                          format_version=np.asarray(99)),
        "strings": _write(tmp_path / "strings.npz", edge_index=edges, num_nodes=n,
                          texts_utf8=np.zeros(3, np.uint8), texts_offsets=np.array([0, 9])),
    }


@pytest.mark.parametrize("case", ["missing", "truncated", "not_zip", "npy", "shape", "float_ids",
                                  "range", "negative", "mask_length", "x_rows", "no_edges",
                                  "version", "strings"])
def test_load_graph_rejects_bad_files(case: str, tmp_path: Path) -> None:
    path = _corrupt_files(tmp_path)[case]
    with pytest.raises(DataFormatError, match=re.escape(str(path))):
        load_graph(path)


# ---------------------------------------------------------------------- conversion
def test_edge_list_with_header_comments_and_weights(tmp_path: Path) -> None:
    path = tmp_path / "edges.csv"
    path.write_text("# a comment\nsrc,dst,weight\n0,1,0.5\n1,2,1\n2,1,1 # repeat\n3,3,1\n")
    g = read_edge_list(path)
    assert g.num_nodes == 4 and g.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    directed = read_edge_list(path, undirected=False)
    assert directed.edge_index.tolist() == [[0, 1, 2], [1, 2, 1]]
    tsv = tmp_path / "edges.tsv"
    tsv.write_text("0\t4\n")
    assert read_edge_list(tsv).num_nodes == 5


def test_edge_list_errors_name_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n2\n")
    with pytest.raises(DataFormatError, match=r"bad\.txt"):
        read_edge_list(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    assert read_edge_list(empty).num_nodes == 0


def test_convert_scipy_npz(tmp_path: Path) -> None:
    adj = sp.csr_matrix(([1.0, 1.0], ([0, 2], [1, 0])), shape=(4, 4))
    sp.save_npz(tmp_path / "adj.npz", adj)
    g = convert(tmp_path / "adj.npz", tmp_path / "out.npz")
    assert g.num_nodes == 4 and g.num_edges == 4
    back = read_graph(tmp_path / "out.npz")
    assert torch.equal(back.edge_index, g.edge_index)
    sp.save_npz(tmp_path / "rect.npz", sp.csr_matrix((2, 3)))
    with pytest.raises(DataFormatError, match=r"rect\.npz"):
        read_graph(tmp_path / "rect.npz")


def test_load_any_dispatch(tmp_path: Path) -> None:
    assert load_any("cora").name == "cora"
    assert load_any("rmat:6", seed=1).num_nodes == 64
    path = save_graph(uniform_random(10, 2), tmp_path / "u.npz")
    assert load_any(path).num_nodes == 10
    with pytest.raises(DataFormatError, match="not-there"):
        load_any(tmp_path / "not-there.npz")
