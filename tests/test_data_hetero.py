"""Typed graphs: validation, the relational form, and every reader (PyG HeteroData in memory
and on disk, DGL heterograph CSV folders, OpenHINE folders, the typed SBM)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sparsegnn.data.dgl_hetero import read_dgl_hetero
from sparsegnn.data.hetero import HeteroGraph
from sparsegnn.data.hetero_io import is_hetero_source, load_hetero
from sparsegnn.data.openhine import read_openhine
from sparsegnn.data.typed_sbm import typed_sbm
from sparsegnn.errors import DataFormatError, IndexOutOfRangeError


def _graph() -> HeteroGraph:
    """Papers (features, labels) written by authors (no features), citing papers."""
    return HeteroGraph(
        num_nodes={"paper": 4, "author": 3},
        edge_index={("author", "writes", "paper"): torch.tensor([[0, 1, 2, 2], [0, 1, 2, 3]]),
                    ("paper", "cites", "paper"): torch.tensor([[0, 1, 3], [1, 2, 2]])},
        x={"paper": torch.arange(8, dtype=torch.float32).view(4, 2)},
        target="paper", y=torch.tensor([0, 1, 1, 0]),
        train_mask=torch.tensor([True, True, False, False]),
        val_mask=torch.tensor([False, False, True, False]),
        test_mask=torch.tensor([False, False, False, True]), name="toy")


def test_relational_form_lays_types_end_to_end_with_inverses() -> None:
    rel = _graph().to_relational()
    assert rel.num_nodes == 7 and rel.offsets == {"paper": 0, "author": 4}
    assert rel.relations == [("author", "writes", "paper"), ("paper", "rev_writes", "author"),
                             ("paper", "cites", "paper"), ("paper", "rev_cites", "paper")]
    writes = rel.edge_index[:, rel.edge_type == 0]
    assert writes.tolist() == [[4, 5, 6, 6], [0, 1, 2, 3]]
    assert rel.edge_index[:, rel.edge_type == 1].tolist() == writes.flip(0).tolist()
    assert rel.node_type.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert rel.target_ids().tolist() == [0, 1, 2, 3]
    assert rel.x is None  # authors have no features: the model goes featureless
    assert _graph().to_relational(inverse=False).num_relations == 2


def test_features_stack_when_every_type_has_one_width() -> None:
    g = _graph()
    g.x["author"] = torch.ones(3, 2)
    rel = g.to_relational()
    assert rel.x.shape == (7, 2) and torch.equal(rel.x[4:], torch.ones(3, 2))


@pytest.mark.parametrize("change, error, text", [
    (lambda g: g.edge_index.update({("author", "writes", "paper"): torch.tensor([[3], [0]])}),
     IndexOutOfRangeError, r"source id 3, outside node type 'author' \(0..2\)"),
    (lambda g: g.edge_index.update({("paper", "cites", "paper"): torch.tensor([[0], [4]])}),
     IndexOutOfRangeError, "destination id 4"),
    (lambda g: g.x.update({"paper": torch.zeros(3, 2)}), DataFormatError,
     "features of node type 'paper' has 3 rows for 4 nodes"),
    (lambda g: g.edge_index.update({("venue", "hosts", "paper"): torch.zeros(2, 0,
                                                                            dtype=torch.long)}),
     DataFormatError, "unknown node type 'venue'"),
    (lambda g: g.x.update({"venue": torch.zeros(1, 2)}), DataFormatError,
     "unknown node type 'venue'"),
    (lambda g: setattr(g, "target", None), DataFormatError, "no target node type"),
    (lambda g: setattr(g, "y", torch.tensor([0, 1])), DataFormatError, "y of target 'paper' "
     "has 2 rows"),
])
def test_validation_is_one_line_naming_the_type(change, error, text) -> None:
    g = _graph()
    change(g)
    with pytest.raises(error, match=text) as info:
        g.validate()
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- PyG HeteroData
def _pyg() -> object:
    """torch_geometric.data, or a skip of this test only (the other readers need no PyG)."""
    return pytest.importorskip("torch_geometric.data")


def _hetero_data() -> object:
    g = _graph()
    data = _pyg().HeteroData()
    data["paper"].x = g.x["paper"]
    data["author"].num_nodes = 3
    for key in ("y", "train_mask", "val_mask", "test_mask"):
        setattr(data["paper"], key, getattr(g, key))
    for et, ei in g.edge_index.items():
        data[et].edge_index = ei
    return data


def _same(a: HeteroGraph, b: HeteroGraph) -> None:
    assert a.num_nodes == b.num_nodes and a.target == b.target
    assert {k: v.tolist() for k, v in a.edge_index.items()} == \
        {k: v.tolist() for k, v in b.edge_index.items()}
    assert set(a.x) == set(b.x) and all(torch.equal(a.x[t], b.x[t]) for t in a.x)
    for key in ("y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(a, key), getattr(b, key))


def test_pyg_hetero_in_memory() -> None:
    from sparsegnn.data.pyg_hetero import from_pyg_hetero

    _same(from_pyg_hetero(_hetero_data(), "toy"), _graph())


def test_pyg_hetero_saved_both_ways(tmp_path: Path) -> None:
    torch.save(_hetero_data(), tmp_path / "toy.pt")
    _pyg().InMemoryDataset.save([_hetero_data()], str(tmp_path / "data.pt"))
    for path in (tmp_path / "toy.pt", tmp_path / "data.pt"):
        assert is_hetero_source(path)
        _same(load_hetero(path), _graph())


class _Exploit:
    """Unpickling this would create a file: the proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.marker,))


def test_a_hetero_pickle_that_runs_code_is_refused(tmp_path: Path) -> None:
    from sparsegnn.data.pyg_hetero import read_pyg_hetero

    marker = tmp_path / "ran"
    data = _hetero_data()
    data["paper"].payload = _Exploit(marker)
    torch.save(data, tmp_path / "evil.pt")
    with pytest.raises(DataFormatError, match="without running code"):
        read_pyg_hetero(tmp_path / "evil.pt")
    assert not marker.exists()


# ---------------------------------------------------------------------- DGL CSV folders
def _dgl_folder(root: Path) -> Path:
    """The layout DGL's CSVDataset documents: meta.yaml naming per-type CSV files."""
    root.mkdir()
    (root / "meta.yaml").write_text(
        "dataset_name: toy\nedge_data:\n- file_name: edges_0.csv\n"
        "  etype: [author, writes, paper]\n- file_name: edges_1.csv\n"
        "  etype: [paper, cites, paper]\nnode_data:\n- file_name: nodes_0.csv\n"
        "  ntype: paper\n- file_name: nodes_1.csv\n  ntype: author\n")
    (root / "edges_0.csv").write_text("src_id,dst_id\n0,0\n1,1\n2,2\n2,3\n")
    (root / "edges_1.csv").write_text("src_id,dst_id,weight\n0,1,1\n1,2,1\n3,2,1\n")
    (root / "nodes_0.csv").write_text(
        "node_id,label,train_mask,val_mask,test_mask,feat\n"
        '3,0,False,False,True,"6.0, 7.0"\n0,0,True,False,False,"0.0, 1.0"\n'
        '1,1,True,False,False,"2.0, 3.0"\n2,1,False,True,False,"4.0, 5.0"\n')
    (root / "nodes_1.csv").write_text("node_id\n0\n1\n2\n")
    return root


def test_dgl_heterograph_folder(tmp_path: Path) -> None:
    folder = _dgl_folder(tmp_path / "toy")
    assert is_hetero_source(folder)
    g = load_hetero(folder)
    assert g.name == "toy"
    _same(g, _graph())


@pytest.mark.parametrize("meta, text", [
    ("node_data:\n- file_name: ../outside.csv\n  ntype: paper\n", "leaves the dataset folder"),
    ("edge_data:\n- file_name: edges_0.csv\n  etype: [author, writes]\n",
     r"etype must be \[src_type, relation, dst_type\]"),
    ("node_data: [unclosed\n", "not readable YAML"),
    ("!!python/object/apply:os.system ['true']\n", "not readable YAML"),
    ("separator: '|'\n", "separator"),
])
def test_dgl_meta_faults_are_one_line(tmp_path: Path, meta: str, text: str) -> None:
    folder = _dgl_folder(tmp_path / "toy")
    (tmp_path / "outside.csv").write_text("node_id\n0\n")
    (folder / "meta.yaml").write_text(meta)
    with pytest.raises(DataFormatError, match=text):
        read_dgl_hetero(folder)


def test_dgl_missing_column_names_the_file(tmp_path: Path) -> None:
    folder = _dgl_folder(tmp_path / "toy")
    (folder / "edges_1.csv").write_text("source,dst_id\n0,1\n")
    with pytest.raises(DataFormatError, match=r"edges_1.csv: no src_id column"):
        read_dgl_hetero(folder)


# ---------------------------------------------------------------------- OpenHINE, typed SBM
def test_openhine_folder(tmp_path: Path) -> None:
    folder = tmp_path / "mini"
    folder.mkdir()
    pairs = [(0, 0), (1, 1), (2, 1), (3, 2), (4, 2), (5, 0)]
    lines = [f"{p}\t{a}\tp-a\t1\n{a}\t{p}\ta-p\t1" for p, a in pairs]
    lines += [f"{p}\t{p % 2}\tp-s\t1\n{p % 2}\t{p}\ts-p\t1" for p, _ in pairs]
    (folder / "edge.txt").write_text("\n".join(lines) + "\n")
    (folder / "label.txt").write_text("".join(f"p{p}\t{p % 3}\n" for p, _ in pairs))
    g = read_openhine(folder, split=(0.5, 0.0, 0.5))
    assert g.num_nodes == {"p": 6, "a": 3, "s": 2} and g.target == "p"
    assert g.edge_index[("p", "p-a", "a")].tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, 1, 2, 2, 0]]
    assert g.y.tolist() == [0, 1, 2, 0, 1, 2] and g.meta["reverse_edges"]
    assert int(g.train_mask.sum()) == 3 and not bool((g.train_mask & g.test_mask).any())
    (folder / "label.txt").write_text("p0\t1\na1\t0\n")
    with pytest.raises(DataFormatError, match="labels must name one node type"):
        read_openhine(folder)


def test_typed_sbm_is_seeded_and_typed() -> None:
    a = typed_sbm(3000, blocks=3, degree=3.0, num_features=5, seed=7)
    b = load_hetero("hsbm:nodes=3000,blocks=3,degree=3,features=5", seed=7)
    assert a.num_nodes == b.num_nodes and sum(a.num_nodes.values()) == 3000
    assert all(torch.equal(a.edge_index[k], b.edge_index[k]) for k in a.edge_index)
    assert torch.equal(a.x["b"], b.x["b"]) and torch.equal(a.y, b.y)
    assert len(a.edge_types) == 4 and a.num_classes == 3
    assert a.counts()["edge_types"]["a__cites__a"] == 3 * a.num_nodes["a"]
    c = typed_sbm(3000, blocks=3, degree=3.0, num_features=5, seed=8)
    assert not torch.equal(a.edge_index[("a", "cites", "a")], c.edge_index[("a", "cites", "a")])
    with pytest.raises(DataFormatError, match="unknown key 'size'"):
        load_hetero("hsbm:size=3")
